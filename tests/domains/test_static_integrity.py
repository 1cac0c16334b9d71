"""The integrity static checks: each rejects plain and aliased cheats and accepts honest code.

Everything is syntax only: no candidate here is ever imported or run.
"""

from __future__ import annotations

import ast
import textwrap
import time
from pathlib import Path

import pytest

from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.static import ast_scan
from stratagem.domains.pytorch.static.ast_scan import Aliases
from stratagem.domains.pytorch.static.checks import (
    DEFAULT_CHECKS,
    REGISTRY,
    checks_for_policy,
    run_static_checks,
)
from stratagem.domains.pytorch.static.native_scan import clean, namespace_state, static_variables
from stratagem.errors import ConfigError


def _checks(*names: str) -> tuple:
    """The registry's checks of these names (registry order)."""
    return tuple(c for c in REGISTRY if c.name in names)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
HONEST_FILES = sorted(
    [
        *ROOT.glob("examples/*/candidates/*.py"),
        *ROOT.glob("tests/fixtures/candidates/*.py"),
        *ROOT.glob("benchmarks/candidates/*.py"),
    ]
)
KERNEL_FILES = [p for p in HONEST_FILES if "cuda" in p.name or "triton" in p.name]
PASS_THROUGH = sorted(ROOT.glob("examples/*/candidates/torch_rewrite.py"))


@pytest.fixture(scope="module")
def problem():
    return load_problem(FIXTURES / "problem_linear.py")


def cand(top: str = "", forward: str = "", init: str = "", cls: str = "") -> str:
    """A candidate for problem_linear: `top` at module level, `forward`/`init` inside methods."""

    def ind(s: str, n: int) -> str:
        return textwrap.indent(textwrap.dedent(s).strip("\n"), " " * n)

    return (
        "import torch\nimport torch.nn as nn\n"
        + textwrap.dedent(top).strip("\n")
        + "\n\n\nclass ModelNew(nn.Module):\n"
        + (ind(cls, 4) + "\n\n" if cls.strip() else "")
        + "    def __init__(self, dim):\n        super().__init__()\n"
        + "        self.lin = nn.Linear(dim, dim)\n"
        + (ind(init, 8) + "\n" if init.strip() else "")
        + "\n    def forward(self, x):\n"
        + (ind(forward, 8) + "\n" if forward.strip() else "")
        + "        return torch.relu(self.lin(x)) * 2.0\n"
    )


def native(src: str, *, top: str = "") -> str:
    """A candidate whose load_inline cuda_sources is `src` (plus a launched kernel)."""
    cuda = (
        "#include <torch/extension.h>\n"
        "__global__ void k(const float* x, float* y, long n) { long i = threadIdx.x; if (i < n) y[i] = x[i]; }\n"
        + textwrap.dedent(src)
        + "\ntorch::Tensor run(torch::Tensor x) {\n    auto y = torch::empty_like(x);\n"
        "    k<<<1, 32, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());\n"
        "    return y;\n}\n"
    )
    return cand(
        top=f"from torch.utils.cpp_extension import load_inline\n{top}\n"
        f"CUDA_SRC = {cuda!r}\n"
        "ext = load_inline(name='t', cpp_sources='torch::Tensor run(torch::Tensor x);', "
        "cuda_sources=CUDA_SRC, functions=['run'])\n",
        forward="x = ext.run(x)",
    )


def rejected_by(problem, source: str, checks=DEFAULT_CHECKS) -> list[str]:
    r = run_static_checks(problem, source, checks=checks)
    return [x["check"] for x in r.details.get("rejections", [])]


def warned_by(problem, source: str) -> list[str]:
    r = run_static_checks(problem, source)
    return [x["check"] for x in r.details["warnings"]]


# -- cheats: (check, source) ------------------------------------------------------------------

CHEATS: dict[str, list[str]] = {
    "reference_access": [
        "from stratagem_reference import Model\n\nclass ModelNew(Model):\n    pass\n",
        cand(top="import sys as s", forward="ref = s.modules['stratagem_reference']"),
        cand(top="from inspect import currentframe as cf", forward="g = cf().f_back.f_globals"),
        cand(top="import gc as collector", forward="objs = collector.get_objects()"),
        cand(forward="subs = ().__class__.__base__.__subclasses__()"),
        cand(top="import __main__ as m"),
        cand(top="from . import helpers"),
        cand(forward="inputs = get_inputs()"),
        cand(top="import sys", forward="f = sys._getframe(1)"),
        cand(top="__name__ = '__main__'") + "\nif __name__ == '__main__':\n    import stratagem_reference\n",
        cand(top="import sys", forward="mods = getattr(sys, 'modules')"),
        cand(top="import os", forward="mods = os.sys.modules"),  # a module re-exported by another
        cand(forward="f = x.__iter__().gi_frame"),
    ],
    "dynamic_code": [
        cand(forward="exec('y = 1')"),
        cand(top="run_code = exec", forward="run_code('y = 1')"),
        cand(forward="name = 'relu'\nf = getattr(torch, name)"),
        cand(forward="e = __builtins__['eval']"),
        cand(top="import importlib as il", forward="m = il.import_module('math')"),
        cand(top="import ctypes"),
        cand(top="from ctypes import CDLL as L", forward="lib = L('libc.so.6')"),
        cand(forward="globals()['y'] = 1"),
        cand(forward="code = (lambda: 0).__code__"),
        cand(forward="ns = torch.__dict__"),
        cand(forward="T = type('T', (object,), {})"),
        native('void* h = dlopen("libcuda.so", 1);'),
        native('PyRun_SimpleString("import os");'),
        cand(top="from functools import reduce", forward="f = reduce(getattr, ['nn', 'functional'], torch)"),
        native("#define CAT(a, b) a##b"),
    ],
    "monkey_patch": [
        cand(top="torch.allclose = lambda *a, **k: True"),
        cand(top="import time as t\nt.perf_counter = lambda: 0.0"),
        cand(top="from torch import cuda as c\nc.synchronize = lambda: None"),
        cand(forward="ev = torch.cuda\nev.Event.elapsed_time = lambda a, b: 0.001"),
        cand(top="setattr(torch, 'allclose', lambda *a, **k: True)"),
        cand(top="import builtins\nbuiltins.print = lambda *a: None"),
        cand(top="torch.Tensor.__eq__ = lambda a, b: True"),
        cand(top="del torch.cuda.synchronize"),
        cand(top="F = getattr(torch.nn, 'functional')\nF.relu = lambda x: x"),
        cand(top="import time", init="self.t = time", forward="self.t.perf_counter = lambda: 0.0"),
        cand(top="for mod in (torch, torch.cuda):\n    mod.synchronize = lambda: None"),
        cand(top="import sys\nsys.settrace(None)"),
        cand(top="lib = torch.library.Library('aten', 'IMPL')"),
        cand(top="object.__setattr__(torch, 'allclose', None)"),
        cand(forward="for cls in (type(x),):\n    cls.__sub__ = lambda a, b: a"),
        cand(forward="list(map(setattr, [type(x)], ['__sub__'], [None]))"),
        cand(top="vars(torch).update(allclose=lambda *a, **k: True)"),
        cand(top="def cuda_mod():\n    return torch.cuda", forward="cuda_mod().synchronize = None"),
        cand(forward="(c := torch.cuda).synchronize = None"),
        cand(forward="x.__class__.__eq__ = lambda a, b: True"),
    ],
    "threads": [
        cand(top="import threading", forward="threading.Thread(target=print).start()"),
        cand(top="from concurrent.futures import ThreadPoolExecutor as Pool", forward="Pool(2)"),
        cand(top="import os as o", forward="o.system('true')"),
        cand(top="sp = __import__('subprocess')"),
        cand(forward="fut = torch.jit.fork(torch.relu, x)"),
        cand(top="import torch.multiprocessing as mp"),
        native("void bg(float* y) { std::thread t([=]{ y[0] = 1; }); t.detach(); }"),
        native("void bg(float* y) { pthread_t t; pthread_create(&t, nullptr, nullptr, y); }"),
        # a real attacker's: the output's tail handed to torch's inter-op pool, never joined
        native("void bg(float* y) { at::launch([=]() { y[0] = 1; }); }"),
        native("void bg() { c10::ThreadPool pool(2); }"),
        cand(top="from os import *", forward="fork()"),
    ],
    "streams": [
        cand(forward="s = torch.cuda.Stream()"),
        cand(top="from torch.cuda import Stream as S", forward="s = S()"),
        cand(forward="c = torch.cuda\nwith c.stream(c.default_stream()):\n    pass"),
        cand(forward="s = getattr(torch.cuda, 'Stream')()"),
        cand(forward="g = torch.cuda.CUDAGraph()"),
        cand(forward="torch.cuda.current_stream().wait_stream(torch.cuda.current_stream())"),
        cand(forward="x.record_stream(torch.cuda.current_stream())"),
        cand(top="import torch.cuda.graphs as G"),
        native("cudaStream_t side() { cudaStream_t s; cudaStreamCreate(&s); return s; }"),
        native("cudaStream_t side() { cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); return s; }"),
        native("void side() { auto s = at::cuda::getStreamFromPool(); }"),
        native("void side(cublasHandle_t h, cudaStream_t s) { cublasSetStream(h, s); }"),
        native("void side(cudaStream_t s) { cudaLaunchHostFunc(s, nullptr, nullptr); }"),
        native("void side(cudaGraphExec_t g, cudaStream_t s) { cudaGraphLaunch(g, s); }"),
        native("void side(cudaStream_t s) { cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal); }"),
        cand(top="SRC = 'void f() { cudaStream_t s; cudaStream' + 'Create(&s); }'"),
        cand(top="SRC = '{}Create(&s);'.format('cudaStream')"),
        cand(top="SRC = '%sCreate(&s);' % 'cudaStream'"),
        cand(top="SRC = 'cudaStreamXCreate'.replace('X', '')"),
        cand(top="A = 'cudaStream'\nB = 'Create(&s);'\nSRC = A + B"),
        cand(top="from torch.cuda import *", forward="s = Stream()"),
        cand(top="FLAGS = ['--default-stream', 'per-thread', '--default-stream=per-thread']"),
    ],
    "mutable_state": [
        cand(top="_CACHE = {}", forward="k = tuple(x.shape)\nif k in _CACHE:\n    return _CACHE[k]\n_CACHE[k] = x"),
        cand(top="_memo = dict()", forward="c = _memo\nc[0] = x"),
        cand(top="_outs = []", forward="_outs.append(x)"),
        cand(top="import collections\n_lru = collections.OrderedDict()", forward="_lru.update({1: x})"),
        cand(top="import functools\n\n@functools.lru_cache(maxsize=None)\ndef f(n):\n    return n"),
        cand(top="from functools import lru_cache as memo\n\n@memo\ndef f(n):\n    return n"),
        cand(forward="key = id(x)"),
        cand(forward="p = x.data_ptr()"),
        cand(forward="p = getattr(x, 'data_ptr')()"),
        cand(forward="v = x._version"),
        cand(forward="s = x.untyped_storage()"),
        cand(top="_last = None", forward="global _last\n_last = x"),
        cand(cls="cache = {}", forward="self.cache[0] = x"),
        cand(forward="ModelNew.last = x"),
        cand(forward="type(self).last = x"),
        cand(top="def helper(x, _seen=[]):\n    _seen.append(x)\n    return x"),
        native("torch::Tensor cached(torch::Tensor x) { static torch::Tensor cache; return cache; }"),
        native("static std::unordered_map<int64_t, torch::Tensor> memo;"),
        native("float* reuse() { static float* buf = nullptr; return buf; }"),
        native("torch::Tensor g_cache;"),
        native("thread_local int calls = 0;"),
        cand(top="_CACHE = {}", init="self.cache = _CACHE", forward="self.cache[0] = x"),
        cand(top="_CACHE = {}", forward="setattr(ModelNew, 'last', x)"),
        cand(top="_CACHE = {}\n\ndef put(k, v, store=_CACHE):\n    store[k] = v"),
        cand(top="_L = []", forward="list.append(_L, x)"),
        cand(top="def make():\n    out = None\n    def f(v):\n        nonlocal out\n        out = v\n        return out\n    return f"),
    ],
    "fake_tensor": [
        cand(top="class Lazy(torch.Tensor):\n    pass"),
        cand(top="from torch import Tensor as T\n\nclass Lazy(T):\n    pass"),
        cand(forward="y = torch.Tensor._make_subclass(torch.Tensor, x)"),
        cand(top="class W:\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n        return f(*a)"),
        cand(top="class Eq:\n    def __eq__(self, other):\n        return True"),
        cand(forward="y = x.clone()\ny.__class__ = torch.nn.Parameter"),
        cand(forward="y = x.as_subclass(torch.Tensor)"),
    ],
    "io": [
        cand(forward="open('/tmp/out', 'w').write('x')"),
        cand(top="import pathlib as pl", forward="pl.Path('o').write_text('')"),
        cand(top="o = open", forward="o('f')"),
        cand(top="P = '/dev/shm/cache.pt'"),
        cand(top="P = '/dev/' + 'shm' + '/x'"),
        cand(forward="torch.save(x, 'out.pt')"),
        cand(top="import pickle as pk"),
        cand(top="import numpy as np", forward="np.save('a.npy', x.cpu().numpy())"),
        cand(top="import os", forward="os.remove('x')"),
        native('void dump(float* y) { FILE* f = fopen("o.bin", "wb"); }'),
        native("void dump() { std::ofstream out; }"),
        cand(forward="s = open('/proc/self/maps').read()"),
    ],
    "global_flags": [
        cand(top="torch.backends.cudnn.benchmark = True"),
        cand(top="import torch.backends.cuda as bc\nbc.matmul.allow_tf32 = True"),
        cand(top="torch.set_float32_matmul_precision('high')"),
        cand(top="from torch import manual_seed as ms\nms(0)"),
        cand(top="import random\nrandom.seed(0)"),
        cand(top="import numpy as np\nnp.random.seed(0)"),
        cand(forward="torch.set_grad_enabled(False)"),
        cand(top="import os\nos.environ['CUDA_LAUNCH_BLOCKING'] = '1'"),
        cand(top="import os as o\no.environ.update({'X': '1'})"),
        cand(top="torch._dynamo.config.cache_size_limit = 1"),
        cand(top="b = torch.backends\nb.cudnn.deterministic = True"),
        cand(top="torch.use_deterministic_algorithms(True)"),
        cand(top="torch.set_default_dtype(torch.float64)"),
        native("void flags() { at::globalContext().setAllowTF32CuBLAS(true); }"),
    ],
    "exception_fallback": [
        cand(forward="try:\n    y = x * 2\nexcept Exception:\n    return torch.relu(x)"),
        cand(forward="try:\n    y = x * 2\nexcept:\n    pass"),
        cand(top="import contextlib as cl", forward="with cl.suppress(Exception):\n    y = x"),
        cand(top="from contextlib import suppress", forward="with suppress(RuntimeError):\n    y = x"),
        cand(top="class Quiet:\n    def __enter__(self):\n        return self\n    def __exit__(self, *a):\n        return True"),
        native("torch::Tensor safe(torch::Tensor x) { try { return x; } catch (...) { return x; } }"),
        cand(top="import contextlib", forward="with contextlib.ExitStack() as st:\n    st.push(lambda *a: True)"),
    ],
    "process_exit": [
        cand(top="import sys", forward="sys.exit(0)"),
        cand(top="from os import _exit as bye", forward="bye(0)"),
        cand(forward="raise SystemExit(0)"),
        cand(forward="exit()"),
        cand(forward="quit()"),
        cand(top="import atexit\natexit.register(print)"),
        cand(top="import os", forward="os.kill(os.getpid(), 9)"),
        native("void reset() { cudaDeviceReset(); }"),
        cand(forward="g = {}\ng['os']._exit(0)"),
    ],
}

ALL_CHEATS = [(check, src) for check, srcs in CHEATS.items() for src in srcs]


@pytest.mark.parametrize(("check", "source"), ALL_CHEATS, ids=[f"{c}-{i}" for c, s in CHEATS.items() for i in range(len(s))])
def test_cheat_is_rejected_by_its_check(problem, check, source):
    r = run_static_checks(problem, source, checks=_checks(check))
    assert r.outcome == "failed", source
    assert r.kind == "rejected"
    rej = r.details["rejections"]
    assert {x["check"] for x in rej} == {check}
    assert all(x["message"] for x in rej)
    assert any(x["line"] for x in rej), rej
    # the default (lenient) set rejects it too, naming the check
    assert check in rejected_by(problem, source)


def test_every_check_has_a_plain_and_an_aliased_cheat():
    rejecting = {c.name for c in DEFAULT_CHECKS if c.severity == "reject"} - {"model_new", "signatures"}
    assert rejecting <= {k for k, v in CHEATS.items() if len(v) >= 2}


def test_messages_say_what_and_why(problem):
    r = run_static_checks(problem, cand(top="from torch.cuda import Stream as S", forward="s = S()"))
    msgs = [x["message"] for x in r.details["rejections"]]
    assert any("`torch.cuda.Stream`" in m and "current stream" in m for m in msgs), msgs
    assert any("(written `S`)" in m for m in msgs), msgs
    assert "line" in (r.reason or "")


# -- honest look-alikes -----------------------------------------------------------------------

HONEST: list[str] = [
    cand(init="self.cache_size = 4\nself.buf = {}", forward="self.buf[0] = 1\nn = self.cache_size"),
    cand(top='"""Module docstring: no threading, no cudaStreamCreate, no /tmp files, no exec."""',
         forward='"""forward: a docstring mentioning threading, sys.exit and open()."""'),
    cand(forward="try:\n    y = x + 1\nfinally:\n    pass"),
    cand(forward="with torch.no_grad():\n    y = x + 1"),
    cand(forward="with torch.set_grad_enabled(False):\n    y = x + 1"),
    cand(forward="outs = []\nfor i in range(2):\n    outs.append(x)\nd = {}\nd['a'] = x\ny = torch.cat(outs)"),
    cand(top="_SUPPORTED = {torch.float32, torch.float64}", forward="assert x.dtype in _SUPPORTED"),
    cand(init="for i in range(2):\n    setattr(self, f'conv{i}', nn.Identity())",
         forward="for i in range(2):\n    x = getattr(self, f'conv{i}')(x)"),
    cand(forward="s = torch.cuda.current_stream()\nh = s.cuda_stream if x.is_cuda else 0"),
    cand(top="import os\nos.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'\nos.environ.setdefault('MAX_JOBS', '4')"),
    cand(forward="msg = 'static shapes only; use torch.cuda.synchronize() carefully'"),
    cand(top="import math\nSCALE = math.sqrt(2.0)", forward="n = int(x.numel())"),
    cand(forward="if torch.backends.cudnn.is_available():\n    pass"),
    cand(top="import torch.nn.functional as F", forward="x = F.relu(x)"),
    cand(top="import triton\nimport triton.language as tl\n\n"
             "@triton.jit\ndef k(x_ptr, n, B: tl.constexpr):\n    id = tl.program_id(0)\n"
             "    offs = id * B + tl.arange(0, B)\n    tl.store(x_ptr + offs, tl.load(x_ptr + offs), mask=offs < n)\n"),
    cand(top="from torch.utils.cpp_extension import load_inline\n_ext = None\n\n"
             "def get_ext():\n    global _ext\n    if _ext is None:\n        _ext = load_inline(name='e', cpp_sources='', functions=[])\n"
             "    return _ext"),
    cand(cls="BLOCK = 256\nNAMES = ('a', 'b')", forward="b = self.BLOCK"),
    cand() + "\n\nif __name__ == '__main__':\n    torch.manual_seed(0)\n    m = ModelNew(*get_init_inputs())\n"
    "    print(torch.allclose(m(*get_inputs()), Model(4)(*get_inputs())))\n",
    native("""
        // comments are not code: cudaStreamCreate(&s); static torch::Tensor cache; fopen("x");
        /* std::thread t; at::cuda::getStreamFromPool(); catch (...) {} __half h; */
        static __device__ __forceinline__ float sq(float v) { return v * v; }
        static inline int cdiv(int a, int b) { return (a + b - 1) / b; }
        static const int kThreads = 256;
        static constexpr float kEps = 1e-6f;
        constexpr int TILE = 32;
        template <int K>
        static void launch_tiles(const torch::Tensor& x, torch::Tensor& y) {
            const float s = static_cast<float>(K);
            cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
            (void)s; (void)stream;
        }
        void helper_decl(int a, const float* p);
        __device__ unsigned int g_counter;
        __constant__ float c_weights[64];
        static_assert(TILE == 32, "tile size");
        #define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be CUDA (no static state)")
        namespace {
        __global__ void k2(float* y) { __shared__ float tile[32]; y[0] = tile[0]; }
        }
    """),
]


HONEST.append(
    cand(top="from torch.utils.cpp_extension import load_inline\nNOTE = '// no cudaStreamCreate, no std::thread\\n'\n"
         "ext = load_inline(name='n', cpp_sources=[NOTE], cuda_sources=NOTE + '/* fopen */', functions=[])")
)


@pytest.mark.parametrize("source", HONEST, ids=[f"honest-{i}" for i in range(len(HONEST))])
def test_honest_look_alikes_pass(problem, source):
    r = run_static_checks(problem, source)
    assert r.outcome == "passed", r.reason
    assert r.details["warnings"] == [], r.details["warnings"]


@pytest.mark.parametrize("path", HONEST_FILES, ids=[f"{p.parent.parent.name}/{p.name}" for p in HONEST_FILES])
def test_honest_files_pass_every_default_check(path):
    src = path.read_text(encoding="utf-8")
    r = run_static_checks(_problem_for(path), src, filename=path.name)
    assert r.outcome == "passed", r.reason
    assert r.details["checks"] == [c.name for c in DEFAULT_CHECKS]


@pytest.mark.parametrize("path", KERNEL_FILES, ids=[f"{p.parent.parent.name}/{p.name}" for p in KERNEL_FILES])
def test_kernel_candidates_pass_the_strict_policy(path):
    r = run_static_checks(_problem_for(path), path.read_text(encoding="utf-8"), checks=checks_for_policy("strict"))
    assert r.outcome == "passed", r.reason


@pytest.mark.parametrize("path", PASS_THROUGH, ids=[p.parent.parent.name for p in PASS_THROUGH])
def test_pass_through_candidates_fail_own_kernels(path):
    src = path.read_text(encoding="utf-8")
    assert run_static_checks(_problem_for(path), src).outcome == "passed"
    r = run_static_checks(_problem_for(path), src, checks=checks_for_policy("strict"))
    assert r.outcome == "failed" and r.kind == "rejected"
    assert [x["check"] for x in r.details["rejections"]] == ["own_kernels"]
    assert "kernel" in (r.reason or "")


def _problem_for(path: Path):
    prob = path.parent.parent / "problem.py"
    if prob.exists():
        return load_problem(prob)
    if path.parent.parent.name == "benchmarks" or "cuda_relu" in path.name:
        return load_problem(FIXTURES / "problem_relu.py")
    return load_problem(FIXTURES / "problem_linear.py")


# -- precision warns, never rejects -----------------------------------------------------------

PRECISION = [
    cand(forward="x = x.half().float()"),
    cand(forward="x = x.to(torch.bfloat16).float()"),
    cand(top="from torch import float16 as f16", forward="x = x.to(f16).float()"),
    cand(forward="with torch.autocast('cuda'):\n    y = x"),
    cand(top="FLAGS = ['-O3', '--use_fast_math']"),
    native("__device__ float h(float v) { __half t = __float2half(v); return __half2float(t); }"),
    cand(top="import triton.language as tl\nDT = tl.float16"),
    cand(top="S = 'torch.backends.cuda.matmul.allow_tf32'"),
    cand(top="import triton.language as tl\n\ndef f(a, b):\n    return tl.dot(a, b, input_precision='tf32')"),
]


@pytest.mark.parametrize("source", PRECISION, ids=[f"precision-{i}" for i in range(len(PRECISION))])
def test_precision_warns_without_rejecting(problem, source):
    r = run_static_checks(problem, source)
    assert r.outcome == "passed", r.reason
    assert "precision" in warned_by(problem, source)


# -- own_kernels (strict) ---------------------------------------------------------------------

DUMMY_CUDA = cand(
    top="from torch.utils.cpp_extension import load_inline\n"
    "SRC = '__global__ void dummy(float* y) { y[0] = 0.f; }\\n"
    "torch::Tensor noop(torch::Tensor x) { return x; }'\n"
    "ext = load_inline(name='d', cpp_sources='torch::Tensor noop(torch::Tensor x);', cuda_sources=SRC, functions=['noop'])\n",
)
UNLAUNCHED_EXPORT = cand(
    top="from torch.utils.cpp_extension import load_inline\n"
    "SRC = '__global__ void dummy(float* y) { y[0] = 0.f; }\\n"
    "torch::Tensor noop(torch::Tensor x) { return torch::relu(x); }'\n"
    "ext = load_inline(name='d', cpp_sources='torch::Tensor noop(torch::Tensor x);', cuda_sources=SRC, functions=['noop'])\n",
    forward="x = ext.noop(x)",
)
DUMMY_TRITON = cand(
    top="import triton\nimport triton.language as tl\n\n"
    "@triton.jit\ndef dummy(x_ptr):\n    tl.store(x_ptr, 0.0)\n",
    init="dummy[(1,)](torch.zeros(1))",
)


@pytest.mark.parametrize("source", [DUMMY_CUDA, UNLAUNCHED_EXPORT, DUMMY_TRITON], ids=["cuda-unused", "export-no-launch", "triton-init-only"])
def test_own_kernels_rejects_kernels_forward_never_launches(problem, source):
    assert run_static_checks(problem, source).outcome == "passed"
    r = run_static_checks(problem, source, checks=_checks("own_kernels"))
    assert r.outcome == "failed" and r.kind == "rejected", r.reason
    assert "never launches" in (r.reason or "")


def test_own_kernels_follows_helpers_aliases_and_pybind(problem):
    triton_via_helper = cand(
        top="import triton as tr\nimport triton.language as tl\nfrom triton import jit\n\n"
        "@jit\ndef kern(x_ptr):\n    tl.store(x_ptr, 0.0)\n\n"
        "def launch(x):\n    kern[(1,)](x)\n    return x\n",
        forward="x = launch(x)",
    )
    pybind = cand(
        top="from torch.utils.cpp_extension import load_inline as li\n"
        "CU = '__global__ void kk(float* y) { y[0] = 0.f; }\\n"
        "void go(float* y) { kk<<<1, 1>>>(y); }'\n"
        "CPP = '#include <torch/extension.h>\\nvoid go(float* y);\\n"
        "torch::Tensor run(torch::Tensor x) { go(x.data_ptr<float>()); return x; }\\n"
        "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &run, \"doc\"); }'\n"
        "mod = li(name='p', cpp_sources=[CPP], cuda_sources=[CU])\n",
        init="self.op = mod.forward",
        forward="x = self.op(x)",
    )
    for src in (triton_via_helper, pybind, native("")):
        r = run_static_checks(problem, src, checks=checks_for_policy("strict"))
        assert r.outcome == "passed", r.reason


# -- policy, registry, agent helper -----------------------------------------------------------


def test_policies_and_registry_order():
    names = [c.name for c in REGISTRY]
    assert names == [
        "model_new", "signatures", "reference_access", "dynamic_code", "monkey_patch", "threads",
        "streams", "mutable_state", "fake_tensor", "io", "global_flags", "exception_fallback",
        "process_exit", "precision", "own_kernels",
    ]
    assert checks_for_policy("lenient") == DEFAULT_CHECKS
    assert checks_for_policy("strict") == REGISTRY
    assert "own_kernels" not in [c.name for c in DEFAULT_CHECKS]
    with pytest.raises(ConfigError, match="policy"):
        checks_for_policy("paranoid")  # type: ignore[arg-type]
    for c in REGISTRY[2:]:
        assert c.doc and (c.kind == "rejected")
    assert {c.name for c in REGISTRY if c.severity == "warn"} == {"precision"}


def test_findings_are_deterministic(problem):
    src = cand(top="import threading\nimport os", forward="os.system('x')\nexec('1')")
    assert run_static_checks(problem, src) == run_static_checks(problem, src)
    assert list(dict.fromkeys(rejected_by(problem, src))) == ["dynamic_code", "threads"]


# -- alias resolution -------------------------------------------------------------------------


def _names(src: str, expr: str) -> set[str]:
    tree = ast.parse(textwrap.dedent(src) + f"\n__probe__ = {expr}\n")
    probe = tree.body[-1].value  # type: ignore[attr-defined]
    return Aliases(tree).qualnames(probe)


@pytest.mark.parametrize(
    ("src", "expr", "want"),
    [
        ("import torch.nn.functional as F", "F.relu", "torch.nn.functional.relu"),
        ("from torch import cuda as c", "c.Stream", "torch.cuda.Stream"),
        ("from torch.cuda import Stream as S", "S", "torch.cuda.Stream"),
        ("import time as t", "t.perf_counter", "time.perf_counter"),
        ("import torch\nx = torch.cuda", "x.Stream", "torch.cuda.Stream"),
        ("import torch\ndef f():\n    y = torch.cuda\n    return y", "y.graph", "torch.cuda.graph"),
        ("import torch", "getattr(torch, 'cuda').Stream", "torch.cuda.Stream"),
        ("import torch\na, b = torch.cuda, 1", "a.Stream", "torch.cuda.Stream"),
        ("import importlib", "importlib.import_module('threading').Thread", "threading.Thread"),
        ("import sys", "sys.modules['threading'].Thread", "threading.Thread"),
        ("import torch", "vars(torch)['cuda'].Stream", "torch.cuda.Stream"),
        ("import torch\ndef f(c=torch.cuda):\n    return c", "c.Stream", "torch.cuda.Stream"),
        ("import torch\nclass A:\n    def __init__(self):\n        self.c = torch.cuda", "self.c.Stream", "torch.cuda.Stream"),
        ("", "open", "builtins.open"),
        ("e = exec", "e", "builtins.exec"),
        ("import torch.cuda", "torch.cuda.Stream", "torch.cuda.Stream"),
    ],
)
def test_alias_resolution(src, expr, want):
    assert want in _names(src, expr)


def test_qualname_shadowing_and_unknowns():
    assert _names("id = 3", "id") == set()  # a local variable, not the builtin
    assert _names("def f(open):\n    return open", "open") == set()
    assert _names("x = compute()", "x.y") == set()
    tree = ast.parse("import torch.nn as nn\nv = nn.Linear\n")
    assert Aliases(tree).qualnames(tree.body[1].value) == {"torch.nn.Linear"}  # type: ignore[attr-defined]
    assert Aliases(tree).qualnames(ast.parse("z").body[0].value) == set()  # type: ignore[attr-defined]


# -- native scanning --------------------------------------------------------------------------


def test_clean_strips_comments_and_literals_keeping_lines():
    src = 'a // x\n/* y\n z */ b "c;d" \'e\'\n'
    out = clean(src)
    assert out.count("\n") == src.count("\n") and len(out) == len(src)
    assert "x" not in out and "y" not in out and "c;d" not in out and "b" in out


@pytest.mark.parametrize(
    ("code", "flagged"),
    [
        ("static torch::Tensor cache;", True),
        ("static std::vector<int> v(10);", True),
        ("static float* buf = nullptr;", True),
        ("static int calls{0};", True),
        ("static void f(int a) { }", False),
        ("static void f(int a);", False),
        ("static __device__ float g(float v) { return v; }", False),
        ("static const int N = 4;", False),
        ("static constexpr int M = 4;", False),
        ("x = static_cast<int>(y);", False),
        ("static inline int h() { return 0; }", False),
    ],
)
def test_static_variables(code, flagged):
    assert bool(list(static_variables(clean(code)))) is flagged


@pytest.mark.parametrize(
    ("code", "flagged"),
    [
        ("torch::Tensor g;", True),
        ("std::unordered_map<int, float*> m;", True),
        ("float* p = nullptr;", True),
        ("torch::Tensor f(torch::Tensor x);", False),
        ("void launch(int which, const float* x, float* y, long n);", False),
        ("constexpr int TILE = 32;", False),
        ("__device__ float* d_ptr;", False),
        ("namespace a { torch::Tensor g2; }", True),
        ("torch::Tensor f(torch::Tensor x) { torch::Tensor local; return local; }", False),
        ("auto fn = [](int a) { return a; };", False),
    ],
)
def test_namespace_state(code, flagged):
    assert bool(list(namespace_state(clean(code)))) is flagged


# -- the parent's scan stays cheap on hostile input -------------------------------------------


def test_pathological_sources_stay_fast(problem):
    doubling = "a0 = 'x' * 10\n" + "".join(f"a{i + 1} = a{i} + a{i}\n" for i in range(60))
    aliases = "x = torch\n" + "x = x.a\nx = x.b\n" * 30
    loops = "S = 'a'\nS = S + S\nT = T + S\nT = S + T\n"
    for top in (doubling, aliases, loops):
        start = time.monotonic()
        r = run_static_checks(problem, cand(top=top))
        assert time.monotonic() - start < 5, top[:40]
        assert r.outcome == "passed", r.reason


def test_strings_too_large_to_check_are_rejected(problem, monkeypatch):
    monkeypatch.setattr(ast_scan, "_MAX_BUILT", 1000)
    top = "a0 = 'x' * 10\n" + "".join(f"a{i + 1} = 'p{i}' + a{i} + a{i}\n" for i in range(12))
    r = run_static_checks(problem, cand(top=top))
    assert r.outcome == "failed"
    assert [x["check"] for x in r.details["rejections"]] == ["dynamic_code"]
    assert "too large" in (r.reason or "")
