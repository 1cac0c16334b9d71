"""Owns the rule tables of the integrity static checks: what each check forbids, and why.

Name patterns are canonical dotted names (after alias resolution, see `ast_scan`): `*` matches
within one component, `**` any run of components, a trailing `$` means exactly that name;
otherwise everything below the name matches too (`threading` covers `threading.Thread`).
Native patterns are regexes over strings (C++/CUDA ones with comments and literals blanked):
`code` rules (generic words like `system(`) apply only to strings that are, or look like,
C++/CUDA source; `text` rules (distinctive API names, compiler flags) to every string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rules:
    why: str
    """One sentence an agent can act on: what is forbidden, why, and what to do instead."""
    names: tuple[str, ...] = ()
    attrs: tuple[str, ...] = ()
    """Attribute names forbidden on any receiver except `self`/`cls` (unless in attrs_on_self)."""
    attrs_on_self: bool = False
    code: tuple[str, ...] = ()
    text: tuple[str, ...] = ()


REFERENCE_ACCESS = Rules(
    why="the candidate may not touch the reference problem or the harness; submit only `ModelNew` "
    "and its kernels",
    names=(
        "sys.modules", "sys._getframe", "sys._current_frames", "sys.exc_info", "sys.last_traceback",
        "inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.getinnerframes",
        "inspect.getframeinfo", "inspect.trace", "inspect.getmodule", "inspect.getmembers",
        "inspect.getsource*", "inspect.getfile", "inspect.getclosurevars", "traceback.extract_stack",
        "traceback.walk_stack", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
        "__main__", "stratagem*", "reference", "problem",
        # the harness's instrumentation (the strict policy's provenance hook and profiler)
        "sys.getprofile", "sys.gettrace", "sys.monitoring", "torch.autograd.profiler._is_profiler_enabled",
        "torch.autograd._profiler_enabled", "torch._C._autograd._profiler_enabled",
        # frames and locals under other names: `logging.currentframe()` is `sys._getframe(1)`,
        # `bdb.Bdb().get_stack(frame, None)` walks `f_back`, `inspect.getargvalues(frame).locals`
        # is `f_locals`; debuggers, tracers and profilers are handed every frame
        "logging.currentframe", "inspect.getargvalues", "inspect.formatargvalues",
        "inspect.getgeneratorlocals", "inspect.getcoroutinelocals", "inspect.getasyncgenlocals",
        "traceback.walk_tb", "traceback.StackSummary", "traceback.TracebackException",
        "sys.exception", "sys.last_exc", "sys.last_value", "sys.last_type",
        "sys._getframemodulename", "sys.getobjects", "warnings._next_external_frame", "bdb", "pdb",
        "trace", "profile", "cProfile", "_lsprof", "faulthandler",
        # dotted names resolved through sys.modules, the problem's module among them
        "pydoc", "logging.config", "torch.package", "torch._utils._import_dotted_name",
    ),
    attrs=("__subclasses__", "f_back", "f_globals", "f_locals", "f_builtins", "tb_frame",
           "tb_next", "gi_frame", "cr_frame", "ag_frame", "__self__"),
    attrs_on_self=True,
    # the modules the worker loads the problem and the candidate into, named in a string (for
    # `pydoc.locate`, pickle's `find_class` and the like)
    text=(r"\bstratagem_(?:reference|candidate)\b", r"\bstratagem\.\w", r"\b__main__\b"),
)
REFERENCE_NAMES = frozenset({"Model", "get_inputs", "get_init_inputs"})

DYNAMIC_CODE = Rules(
    why="dynamic code hides what runs from the checks; write plain, static code",
    names=(
        "builtins.exec", "builtins.eval", "builtins.compile", "builtins.__import__",
        "builtins.globals", "builtins.vars", "builtins.locals", "builtins.breakpoint", "builtins$",
        "importlib", "imp", "runpy", "code", "codeop", "zipimport", "pkgutil",
        "types.FunctionType", "types.CodeType", "types.LambdaType", "types.MethodType",
        "types.ModuleType", "types.new_class", "ctypes", "_ctypes", "cffi",
        "operator.attrgetter", "operator.methodcaller",
        # TorchScript compiled from a string runs code no check reads (a fork among it)
        "torch.jit.CompilationUnit", "torch.jit._script.CompilationUnit", "torch._C.CompilationUnit",
        "torch._C._jit_script_compile*",
    ),
    attrs=("__code__", "__globals__", "__closure__", "__builtins__", "__getattribute__",
           "func_globals", "gi_code", "f_code", "co_code", "__loader__", "__spec__"),
    attrs_on_self=True,
    text=(r"\bdlopen\b", r"\bdlsym\b", r"\bPy_CompileString\w*",
          r"\bPy(?:Object|Dict|Module|Import|Run|Eval|Sys|Frame|Thread|GILState|Code|Function)_\w+",
          r"\b(?:py|pybind11)::(?:module_?::import|exec|eval|eval_file|globals)\b"),
    code=(r"##",),
)

MONKEY_PATCH = Rules(
    why="changing imported modules, classes or builtins can tamper with the timer, the comparison "
    "or the reference",
    names=(
        "sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.setswitchinterval",
        "sys.setrecursionlimit", "torch.nn.modules.module.register_module_*",
        "torch.nn.modules.module._global_*", "unittest.mock", "mock",
    ),
)

THREADS = Rules(
    why="background work can finish after the timer stops; do all work synchronously in `forward`",
    names=(
        "threading", "_thread", "multiprocessing", "concurrent", "subprocess", "asyncio", "pty",
        "signal", "sched", "_posixsubprocess", "joblib", "os.fork", "os.forkpty", "os.system",
        "os.popen", "os.spawn*", "os.exec*", "os.posix_spawn*", "os.register_at_fork", "os.wait*",
        "torch.multiprocessing", "torch.jit.fork", "torch.jit._fork", "torch.jit.wait",
        "torch.futures", "torch.distributed", "torch._C._jit_fork*", "torch._C.Future",
        "torch.utils.data.DataLoader", "torch.utils.data.dataloader", "torch.utils.data._utils",
        "torch.jit._async", "torch._C.fork", "torch._C.wait",
    ),
    text=(r"\bstd::(?:thread|jthread|async)\b", r"\bpthread_\w+", r"\bposix_spawn\w*",
          # torch's own pools from C++: the inter-op pool (the C++ twin of torch.jit.fork) and c10's
          r"\bat::(?:launch|intraop_launch\w*|launch_no_thread_state)\b", r"\bc10::(?:TaskThreadPool|ThreadPool)\b",
          r"\bget_(?:inter|intra)op_thread_pool\b"),
    code=(r"\bj?thread\s+\w+\s*[({]", r"\bv?fork\s*\(", r"\bpopen\s*\(", r"\bsystem\s*\(", r"\bexec[lv]p?e?\s*\("),
)

STREAMS = Rules(
    why="work on side streams or CUDA graphs escapes the timer; launch on the current stream "
    "(`torch.cuda.current_stream()`, `at::cuda::getCurrentCUDAStream()`)",
    names=(
        "torch.cuda.Stream", "torch.cuda.ExternalStream", "torch.cuda.stream", "torch.cuda.streams",
        "torch.cuda.StreamContext", "torch.cuda.set_stream", "torch.cuda._set_stream_by_id",
        "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.CUDAGraph",
        "torch.cuda.make_graphed_callables", "torch.cuda.graph_pool_handle", "torch.Stream",
        "torch.StreamContext", "torch._C._CudaStreamBase", "torch._C._cuda_setStream",
        "torch._C._CUDAGraph", "cupy.cuda.Stream", "cupy.cuda.ExternalStream", "cupy.cuda.Graph",
        "numba.cuda.stream", "triton.testing.CudaGraph*",
    ),
    attrs=("wait_stream", "record_stream", "capture_begin", "capture_end"),
    attrs_on_self=True,
    text=(r"\bcudaStreamCreate\w*", r"\bcuStreamCreate\w*", r"\b\w*SetStream\w*",
          r"\bcu(?:da)?LaunchHostFunc\b", r"\bcudaStreamAddCallback\b", r"\bgetStreamFromPool\b",
          r"\bgetStreamFromExternal\b", r"\bsetCurrentCUDAStream\b", r"\bCUDA(?:Multi)?StreamGuard\b",
          r"\bcudaGraph\w+", r"\bcuGraph\w+", r"\bcu(?:da)?StreamBeginCapture\w*",
          r"\bcu(?:da)?StreamEndCapture\b", r"\bcudaStreamPerThread\b", r"\bcudaStreamWaitEvent\b",
          r"default-stream[= ]+per-thread", r"\bCUDAGraph\b"),
)

MUTABLE_STATE = Rules(
    why="state kept between calls can replay cached outputs; compute every output from the "
    "current inputs",
    names=("builtins.id", "functools.lru_cache", "functools.cache", "functools.cached_property",
           "functools._lru_cache_wrapper", "cachetools", "methodtools", "weakref.finalize",
           "operator.setitem", "operator.delitem", "operator.__setitem__", "operator.__delitem__"),
    attrs=("data_ptr", "_version", "storage", "untyped_storage", "_typed_storage", "_cdata",
           "_storage", "__cuda_array_interface__", "__array_interface__"),
)
CONTAINER_CALLS = (
    "builtins.dict$", "builtins.list$", "builtins.set$", "builtins.bytearray$", "collections",
    "weakref.WeakKeyDictionary", "weakref.WeakValueDictionary", "weakref.WeakSet", "array.array",
    "queue", "types.SimpleNamespace",
)
MUTATORS = frozenset(
    "append extend insert update setdefault add pop popitem clear remove discard appendleft "
    "extendleft sort reverse __setitem__ __delitem__ difference_update intersection_update "
    "symmetric_difference_update __iadd__ __ior__ put put_nowait".split()
)

FAKE_TENSOR = Rules(
    why="tensor subclasses and comparison overrides can fake outputs; return plain "
    "`torch.Tensor`s",
    names=("torch.overrides", "torch.utils._python_dispatch", "torch._C._DisableTorch*",
           "torch._C.DisableTorch*", "torch._C._disabled_torch_*", "torch._C._EnableTorch*",
           "torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass",
           "torch._C._set_torch_function_mode", "torch._C._push_on_torch_*"),
    attrs=("_make_subclass", "_make_wrapper_subclass", "as_subclass", "__torch_function__",
           "__torch_dispatch__"),
    attrs_on_self=True,
)
TENSOR_BASES = ("torch.Tensor$", "torch.nn.Parameter$", "torch.nn.parameter.Parameter$",
                "torch._C.TensorBase$", "torch._C._TensorBase$", "torch.nn.parameter.Buffer$",
                "torch.nn.Buffer$", "numpy.ndarray$")
FAKE_METHODS = frozenset({"__torch_function__", "__torch_dispatch__", "__eq__", "__ne__",
                          "__bool__", "__instancecheck__", "__subclasscheck__",
                          "__array_function__", "__array_ufunc__"})

IO = Rules(
    why="file, socket and shared-memory I/O can smuggle results between runs; do no I/O "
    "(load_inline is fine)",
    names=(
        "builtins.open", "builtins.input", "io", "pathlib", "os.remove", "os.rename", "os.renames",
        "os.replace", "os.unlink", "os.makedirs", "os.mkdir", "os.rmdir", "os.removedirs",
        "os.listdir", "os.scandir", "os.walk", "os.fwalk", "os.open", "os.read", "os.write",
        "os.fdopen", "os.pipe", "os.mkfifo", "os.mknod", "os.memfd_create", "os.truncate",
        "os.ftruncate", "os.link", "os.symlink", "os.chmod", "os.chown", "os.utime", "os.sendfile",
        "os.chdir", "os.pread", "os.pwrite", "os.readlink", "os.dup", "os.dup2", "shutil",
        "tempfile", "pickle", "cPickle", "_pickle", "marshal", "shelve", "dbm", "sqlite3",
        "socket", "urllib", "urllib3", "http", "requests", "httpx", "aiohttp", "ssl", "mmap",
        "glob", "fileinput", "zipfile", "tarfile", "gzip", "bz2", "lzma", "ftplib", "smtplib",
        "telnetlib", "xmlrpc", "webbrowser", "select", "selectors", "multiprocessing.shared_memory",
        "torch.save", "torch.load", "torch.from_file", "torch.hub", "torch.ops.load_library",
        "torch.classes.load_library", "torch.jit.save", "torch.jit.load", "numpy.save*",
        "numpy.load*", "numpy.fromfile", "numpy.memmap", "numpy.genfromtxt", "sys.stdin",
        "torch.*.from_file", "pandas", "linecache", "codecs.open", "posix", "nt", "_io", "fcntl",
    ),
    attrs=("tofile",),
    text=(r"\bf(?:re)?open\s*\(", r"\bstd::(?:i|o)?fstream\b", r"\bshm_open\b", r"\bstd::filesystem\b"),
    code=(r"\b(?:i|o)?fstream\b", r"\bmmap\s*\(", r"\bsocket\s*\(", r"\bf(?:write|read)\s*\(",
          r"\bopen\s*\("),
)
IO_PATHS = ("/dev/shm", "/proc/")

GLOBAL_FLAGS = Rules(
    why="global torch settings, the environment and RNG state belong to the harness; leave them "
    "alone, and do not read the RNG's seed or state either (it predicts the inputs) "
    "(os.environ TORCH_CUDA_ARCH_LIST and MAX_JOBS are allowed)",
    names=(
        "torch.set_float32_matmul_precision", "torch.backends.**.flags", "torch.set_flush_denormal",
        "torch.use_deterministic_algorithms", "torch.set_deterministic_debug_mode",
        "torch.set_default_*", "torch.set_num_threads", "torch.set_num_interop_threads",
        "torch._C._set_*", "torch._C._jit_set*", "torch.manual_seed", "torch.seed",
        "torch.set_rng_state", "torch.random.*seed*", "torch.random.set_rng_state",
        "torch.initial_seed", "torch.get_rng_state", "torch.random.get_rng_state", "torch.cuda.get_rng_state*",
        "torch.cuda.random.get_rng_state*", "random.getstate", "numpy.random.get_state",
        "torch.cuda.manual_seed*", "torch.cuda.seed*", "torch.cuda.set_rng_state*",
        "torch.cuda.random.*seed*", "torch.cuda.random.set_rng_state*",
        "torch.cuda.set_per_process_memory_fraction", "torch.cuda.memory.set_per_process_memory_fraction",
        "torch.cuda.set_device", "torch.cuda.set_sync_debug_mode", "torch.cuda.tunable.enable",
        "torch.cuda.tunable.set_*", "torch.cuda.memory._set_allocator_settings",
        "torch.set_autocast_*", "torch.set_anomaly_enabled", "random.seed", "random.setstate",
        "numpy.random.seed", "numpy.random.set_state", "os.putenv", "os.unsetenv",
        "torch._dynamo.config.patch", "torch._inductor.config.patch", "torch._dynamo.reset",
    ),
    text=(r"\bglobalContext\s*\(\s*\)\s*\.\s*set\w*", r"\bsetAllowTF32\w*",
          r"\bsetBenchmarkCuDNN\b", r"\bsetDeterministic\w*", r"\bsetFloat32MatmulPrecision\b",
          r"\bset_current_seed\b", r"\bcublasSetMathMode\b", r"\bcublasSetWorkspace\w*",
          r"\bcublasSetAtomicsMode\b"),
    code=(r"\b(?:set|put|unset)env\s*\(", r"\bset_num_threads\b", r"\bmanual_seed\b"),
)
FLAG_STORES = ("torch.backends", "torch._dynamo.config", "torch._inductor.config",
               "torch._functorch.config", "torch.cuda.matmul", "torch.jit._state")
GRAD_SWITCHES = ("torch.set_grad_enabled$", "torch.autograd.set_grad_enabled$",
                 "torch.autograd.grad_mode.set_grad_enabled$", "torch._C._set_grad_enabled$")
ENV_ALLOWED = frozenset({"TORCH_CUDA_ARCH_LIST", "MAX_JOBS"})

EXCEPTION_FALLBACK = Rules(
    why="try/except can hide a failing kernel behind a fallback; let errors propagate "
    "(try/finally is fine)",
    names=("contextlib.suppress", "contextlib.ContextDecorator", "contextlib.ExitStack",
           "contextlib.AsyncExitStack"),
    code=(r"\bcatch\s*\(",),
)

PROCESS_EXIT = Rules(
    why="exiting or signalling the process aborts the evaluation; return normally",
    names=("sys.exit", "os._exit", "os.abort", "os.kill", "os.killpg", "builtins.exit",
           "builtins.quit", "builtins.SystemExit", "builtins.KeyboardInterrupt",
           "builtins.GeneratorExit", "builtins.BaseException", "atexit",
           "_thread.interrupt_main"),
    attrs=("_exit", "exit", "abort"),
    attrs_on_self=True,
    text=(r"\bcudaDeviceReset\b",),
    code=(r"\bkill\s*\(", r"\bgetppid\b", r"\braise\s*\(\s*SIG\w*",
          r"\bstd::(?:quick_)?exit\b", r"\b_(?:E|e)xit\s*\(", r"\bquick_exit\b"),
)

PRECISION = Rules(
    why="lower precision than the reference passes only if the output stays within the tolerance",
    names=("torch.float16", "torch.half", "torch.bfloat16", "torch.float8*", "torch.autocast",
           "torch.cuda.amp", "torch.amp", "torch.cpu.amp", "triton.language.float16",
           "triton.language.bfloat16", "triton.language.float8*", "numpy.float16", "numpy.half"),
    attrs=("half", "bfloat16", "allow_tf32", "allow_fp16_reduced_precision_reduction",
           "allow_bf16_reduced_precision_reduction"),
    attrs_on_self=True,
    code=(r"\bhalf2\b", r"\b__(?:exp|log|pow|sin|cos|tan|exp10|log2|log10)f\b", r"\b__fdividef\b"),
    text=(r"-?-use_fast_math", r"-ffast-math", r"-ftz=true", r"-prec-(?:div|sqrt)=false",
          r"\ballow_tf32\b", r"\b__half\w*", r"\b__nv_bfloat16\w*", r"\b__float2half\w*",
          r"\b__float2bfloat16\w*", r"\b__nv_fp8\w*", r"\bprecision::tf32\b", r"\b__float_to_tf32\b"),
)


# -- dotted-name patterns ------------------------------------------------------------------

_GLOB_CACHE: dict[str, re.Pattern[str]] = {}


def _glob_body(pattern: str) -> str:
    exact = pattern.endswith("$")
    body = re.escape(pattern.rstrip("$")).replace(r"\*\*", ".*").replace(r"\*", r"[^.]*")
    return body if exact else body + r"(?:\..*)?"


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Dotted-name pattern: `*` is part of one component, `**` any run of components, a
    trailing `$` means exact; otherwise anything below the name matches too."""
    rx = _GLOB_CACHE.get(pattern)
    if rx is None:
        rx = _GLOB_CACHE[pattern] = re.compile(_glob_body(pattern))
    return rx


_TABLE_CACHE: dict[tuple[str, ...], re.Pattern[str]] = {}


def first_match(names: set[str], patterns: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, pattern) for the first pattern (in table order) any of `names` matches."""
    if not names or not patterns:
        return None
    rx = _TABLE_CACHE.get(patterns)
    if rx is None:
        rx = _TABLE_CACHE[patterns] = re.compile(
            "|".join(f"(?P<p{i}>{_glob_body(p)})" for i, p in enumerate(patterns))
        )
    best: tuple[int, str] | None = None
    for n in sorted(names):
        m = rx.fullmatch(n)
        if m and m.lastgroup and (best is None or int(m.lastgroup[1:]) < best[0]):
            best = (int(m.lastgroup[1:]), n)
    return None if best is None else (best[1], patterns[best[0]])
