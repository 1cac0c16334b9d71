"""Owns the worker's wrapper of torch's `load_inline`: unchanged sources load from the shared
build cache, builds run outside the device lock, in a machine-wide build slot, with precompiled
headers and only the device's own architecture.

Worker-side only. `install` replaces `torch.utils.cpp_extension.load_inline` (and wraps `load`)
before any candidate code is imported, so `from torch.utils.cpp_extension import load_inline`
in a candidate gets the wrapper. A call:

- is keyed (`build_cache.key_of`) by its sources, functions, flags and module name and by the
  toolchain (torch, CUDA, nvcc and C++ compiler versions, Python, the architecture list); a
  verified entry is imported without building (`build_cache.py` says how entries are checked);
- otherwise builds as torch would, in a build directory of its own under the slot's build root,
  after taking a machine-wide build slot (`concurrent_builds`: the cores / 2 builds at once,
  two compile units each), with the device lock let go (`DeviceUse.released`), and publishes the
  library;
- is not cached (built as torch would, still outside the lock) when it names its own build
  directory, include paths (their files are not part of the key), SYCL sources or a
  non-module build.

Flags the harness adds: `-gencode` for the device's own architecture alone, without PTX (torch's
default also embeds PTX; a user's `TORCH_CUDA_ARCH_LIST` is kept), and `use_pch=True` for the
C++ part of GPU workers where torch supports it (gcc on Linux, torch's include folder writable:
the one header torch keeps there is shared under a machine-wide lock, `_header`). A candidate's `-O` flags and its own
`-gencode`/`-arch` flags are left as it set them. `MAX_JOBS` is left unset: ninja then runs as
many jobs as there are cores, and a build has at most two compile units.

Split build (`kernel_split.py`, `[pytorch] split_builds`) and header diet (`header_diet.py`,
`STRATAGEM_BUILD_HEADER_DIET=0` turns both off): four builds are tried in order, lightest
first: the split build (the kernels compiled without torch's headers, the host code in
`main.cpp`, both with `no_implicit_headers=True`), lean headers (`header_diet.lean`: the
tensor API and the per-operator headers the source names, with `no_implicit_headers=True`,
where torch's `load_inline` has it), the diet (`torch/extension.h` in the `.cu` becomes
`torch/types.h`), then the call as written, whose error is the candidate's. Each has its own
cache key, looked up in the same order; a build is published under the key of the attempt
that built, in the same folder (a fallback reuses main.cpp's object where its flags are the
same). The header tools load on a design's first build: one that builds nothing loads none.
"""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch  # noqa: F401 - worker-side (cpp_extension and dynamo only where needed)

from stratagem.domains.pytorch.build import builds
from stratagem.domains.pytorch.build.build_cache import (
    BuildCache,
    BuildEvent,
    build_slot,
    concurrent_builds,
    key_of,
)
from stratagem.worker_api.machine_load import usable_cores

PCH_VAR = "STRATAGEM_BUILD_PCH"
"""`0` turns precompiled headers off (to measure what they save), `1` on on the CPU device too
(unset: on for GPU workers only; a CPU worker's first build would pay for the header)."""
DIET_VAR = "STRATAGEM_BUILD_HEADER_DIET"
"""`0` builds CUDA sources as written; else the lighter builds first (the module docstring)."""
EVENTS: list[BuildEvent] = []
"""Every `load_inline` call of this process, in order (the load stage reports them)."""


@dataclass(frozen=True)
class Hooks:
    """What the wrapper asks of the worker around a build."""

    released: Callable[[], contextlib.AbstractContextManager[Any]]
    """Entered around a build: the device lock let go (`DeviceUse.released`)."""
    waiting: Callable[[], contextlib.AbstractContextManager[Any]]
    """Entered around a wait for a build slot or the header lock (the `wait` phase)."""


_state: dict[str, Any] = {"hooks": Hooks(contextlib.nullcontext, contextlib.nullcontext), "original": None, "original_load": None,
                          "pch": None, "toolchain": None, "cache": None, "arch": None, "signature": None, "device": "cpu",
                          "settings_off": frozenset()}


def cache_root() -> Path | None:
    """The cache the slot names (`STRATAGEM_BUILD_CACHE`), None when unset or `off`."""
    value = os.environ.get("STRATAGEM_BUILD_CACHE", "")
    return None if value.strip().lower() in ("", "off", "0", "false", "none") else Path(value)


def apply_settings(request: Mapping[str, Any]) -> None:
    """The request's `[pytorch]` build switches (`precompiled_headers`, `header_diet`,
    `split_builds`) for this process: a switch the user turned off stays off whatever the
    worker's environment says (a CPU build worker is started with precompiled headers on)."""
    _state["settings_off"] = frozenset(k for k in ("precompiled_headers", "header_diet", "split_builds")
                                       if request.get(k) is False)


def install(device: str, hooks: Hooks | None = None) -> None:
    """Put the wrapper in place (idempotent; `hooks` replace the last ones)."""
    import torch.utils.cpp_extension as ext

    if hooks is not None:
        _state["hooks"] = hooks
    _state["device"] = device
    root = cache_root()
    _state["cache"] = BuildCache(root) if root is not None else None
    if device.startswith("cuda") and not os.environ.get("TORCH_CUDA_ARCH_LIST", ""):
        _state["arch"] = _device_arch(device)
    elif device == "cpu" and not os.environ.get("TORCH_CUDA_ARCH_LIST", ""):
        # a prebuild worker (worker/prebuild.py): no GPU, the target GPU's capability given
        _state["arch"] = _capped_arch(os.environ.get("STRATAGEM_BUILD_ARCH", ""))
    if _state["original"] is None:
        _state["original"], _state["original_load"] = ext.load_inline, ext.load
        _state["signature"] = inspect.signature(ext.load_inline)
    ext.load_inline = load_inline  # type: ignore[assignment]
    ext.remove_extension_h_precompiler_headers = _keep_header  # type: ignore[assignment]
    ext.load = load  # type: ignore[assignment]


def _keep_header() -> None:
    """torch deletes the precompiled header on every call without `use_pch`, under the feet of
    builds that read it; a worker never does."""


def _device_arch(device: str) -> str | None:
    """`90` for an H200: the device's compute capability, capped at torch's newest."""
    try:
        major, minor = torch.cuda.get_device_capability(torch.device(device))
    except Exception:  # no arch list: torch's default
        return None
    return _capped_arch(f"{major}{minor}")


def _capped_arch(capability: str) -> str | None:
    """A compute capability (`90`, `9.0`) capped at the newest architecture torch was built for
    (None: not a capability)."""
    digits = capability.replace(".", "").strip()
    if not digits.isdigit():
        return None
    try:
        # torch's build flags need no device (get_arch_list is empty where no GPU is visible)
        listed = torch.cuda.get_arch_list() or str(getattr(torch._C, "_cuda_getArchFlags", lambda: "")() or "").split()
        built = [a for a in listed if a.startswith("sm_")]
        newest = max((int(a[3:-1] if a[-1].isalpha() else a[3:]) for a in built), default=int(digits))
    except Exception:  # noqa: BLE001 - no arch list: the capability as read
        newest = int(digits)
    return str(min(int(digits), newest))


def target_arch() -> str | None:
    """The architecture this process builds CUDA code for (None: torch's default)."""
    return _state.get("arch")


def load_inline(*args: Any, **kwargs: Any) -> Any:
    """`torch.utils.cpp_extension.load_inline`, cached and built outside the device lock."""
    real = _state["original"]
    try:
        bound = _state["signature"].bind(*args, **kwargs)
    except TypeError:
        return real(*args, **kwargs)  # torch says what is wrong with the call
    bound.apply_defaults()
    a = dict(bound.arguments)
    name = str(a["name"])
    if _pch_usable(a):
        a["use_pch"] = True
    _only_this_arch(a)
    attempts, not_split = _attempts(a)
    cache: BuildCache | None = _state["cache"]
    why = _uncacheable(a) or (None if cache is not None else "the build cache is off")
    keys = [key_of(inputs) for *_, inputs in attempts] if why is None else []  # none: not cached
    dest = builds.build_root() / f"{name}-{keys[0][:16]}" if keys else None
    t0 = time.perf_counter()
    rejected: str | None = None
    if cache is not None and dest is not None:
        # the lightest first, then each heavier one (an earlier fallback, or the diet off)
        for (_call, note, _inputs), k in zip(attempts, keys, strict=True):
            got = cache.fetch(k, dest)
            if got.library is not None and got.module is not None:
                import torch.utils.cpp_extension as ext

                try:
                    module = ext._import_module_from_library(got.module, str(dest), True)
                except (ImportError, OSError, AttributeError) as e:  # built again below, as on a miss
                    rejected = rejected or f"the cached library did not import: {e}"
                else:
                    EVENTS.append(BuildEvent(name, k, "hit", time.perf_counter() - t0, header_diet=_with(note, not_split)))
                    return module
            rejected = rejected or got.rejected
        dest.mkdir(parents=True, exist_ok=True)
        for call, *_ in attempts:
            call["build_directory"] = str(dest)  # a fallback reuses main.cpp's object where it can
    with _building(a) as waited:
        module, diet_note, i = _build(real, attempts)
    library = Path(str(getattr(module, "__file__", "")))
    if cache is not None and keys and library.is_file():
        cache.publish(keys[i], library, library.name.split(".")[0], attempts[i][2])
    outcome = "rejected" if rejected else "built" if keys else "uncached"
    EVENTS.append(BuildEvent(name, keys[i] if keys else None, outcome, time.perf_counter() - t0 - waited[0], waited[0],
                             why or rejected, _with(diet_note, not_split)))
    return module


def _with(note: str | None, not_split: str | None) -> str | None:
    """The build record's note with why the sources were not split after it."""
    return note if not_split is None else f"{note} ({not_split})" if note else not_split


def _attempts(a: dict[str, Any]) -> tuple[list[tuple[dict[str, Any], str | None, dict[str, Any]]], str | None]:
    """The builds to try in the module docstring's order, each (call, note, cache-key inputs;
    the last one's note says why the lighter ones were not tried, or None), and why the sources
    were not split (None: they were, or the split was not tried). Each lighter one's maker
    (`_split`, `_leaned`, `_lightened`) gives (call, note, its `header_diet` key) or None, and
    why not."""
    cut, split_note = _split(a)
    leaned, lean_note = _leaned(a)
    light, diet_note = _lightened(a)
    out: list[tuple[dict[str, Any], str | None, dict[str, Any]]] = [
        (call, note, {**build_inputs(call), "header_diet": version})
        for call, note, version in filter(None, (cut, leaned, light))]
    last = "as written" if out else (diet_note or lean_note or split_note)
    out.append((a, last, build_inputs(a)))
    return out, split_note


def _lightened(a: dict[str, Any]) -> tuple[tuple[dict[str, Any], str, str | int] | None, str | None]:
    """The call with its CUDA sources on the header diet (`header_diet.py`)."""
    sources = _texts(a.get("cuda_sources"))
    if not sources or not _diet_on():
        return None, None
    from stratagem.domains.pytorch.build import header_diet

    diet = header_diet.lighten(sources)
    if diet.sources is None:
        return None, f"skipped: {diet.skipped}" if diet.skipped else None
    return ({**a, "cuda_sources": diet.sources}, "lightened", header_diet.VERSION), None


def _split(a: dict[str, Any]) -> tuple[tuple[dict[str, Any], str, str | int] | None, str | None]:
    """The call split into a kernel unit without torch's headers and host code in `main.cpp`
    (`kernel_split.py`), where torch's `load_inline` has `no_implicit_headers` (a note why not
    only when it was tried on the source)."""
    sources = _headerless(a, _diet_on() and "split_builds" not in _state["settings_off"])
    if not sources:
        return None, None
    from stratagem.domains.pytorch.build import kernel_split

    got = kernel_split.split(sources, _texts(a.get("cpp_sources")), _texts(a.get("extra_cuda_cflags")),
                             _texts(a.get("extra_cflags")))
    if got.cuda_sources is None:
        return None, f"not split: {got.skipped}"
    call = {**a, "cuda_sources": got.cuda_sources, "cpp_sources": got.cpp_sources, "no_implicit_headers": True}
    return (call, "split", f"split-{kernel_split.VERSION}"), None


def _headerless(a: dict[str, Any], on: bool) -> list[str]:
    """The call's CUDA sources, when a build without torch's own headers may be tried (`on`,
    torch's `load_inline` has `no_implicit_headers` and the call did not already set it)."""
    sources = _texts(a.get("cuda_sources"))
    ok = on and not a.get("no_implicit_headers") and "no_implicit_headers" in _state["signature"].parameters
    return sources if ok else []


def _leaned(a: dict[str, Any]) -> tuple[tuple[dict[str, Any], str, str | int] | None, str | None]:
    """The call with lean headers (`header_diet.lean`), where torch's `load_inline` can leave
    out its own headers (`no_implicit_headers`) and the call did not already."""
    sources = _headerless(a, _diet_on())
    if not sources:
        return None, None
    from stratagem.domains.pytorch.build import header_diet

    ops = _operator_folder()
    got = header_diet.lean(sources, _texts(a.get("cpp_sources")),
                           lambda n: ops is not None and (ops / f"{n}.h").is_file())
    if got.cuda_sources is None:
        return None, f"skipped: {got.skipped}" if got.skipped else None
    call = {**a, "cuda_sources": got.cuda_sources, "cpp_sources": got.cpp_sources, "no_implicit_headers": True}
    return (call, "lean", f"lean-{header_diet.LEAN_VERSION}"), None


def _operator_folder() -> Path | None:
    """torch's `ATen/ops` include folder (per-operator headers), None when it has none."""
    import torch.utils.cpp_extension as ext

    for inc in ext.include_paths():
        if (Path(inc) / "ATen" / "ops").is_dir():
            return Path(inc) / "ATen" / "ops"
    return None


def _build(real: Callable[..., Any], attempts: list[tuple[dict[str, Any], str | None, dict[str, Any]]]
           ) -> tuple[Any, str | None, int]:
    """Build the attempts in order until one compiles (the last, the call as written, gets
    torch's own error): the module, a note saying which built and what the lighter ones
    failed on, and the index of the attempt that built."""
    import torch.utils.cpp_extension as ext

    versions: dict[str, Any] = ext.JIT_EXTENSION_VERSIONER.entries
    failed: list[str] = []
    for i, (call, note, _inputs) in enumerate(attempts[:-1]):
        name = str(call["name"])
        before = versions.get(name)
        t0 = time.perf_counter()
        try:  # `use_pch` as `_header` left it for this build
            module = real(**{**call, "use_pch": attempts[-1][0].get("use_pch", False)})
        except Exception as e:  # a compile error (torch's RuntimeError) or an import failure
            # torch counted these sources as a new version of `name`; the next build gets the
            # name and version torch would have given it without this attempt
            if before is None:
                versions.pop(name, None)
            else:
                versions[name] = before
            first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
            failed.append(f"the {note} source did not build in {time.perf_counter() - t0:.1f} s ({first})")
            continue
        return module, note if not failed else f"fell back: {'; '.join(failed)}; built {note}", i
    call, note, _inputs = attempts[-1]
    module = real(**call)
    return module, note if not failed else f"fell back: {'; '.join(failed)}; built as written", len(attempts) - 1


def _diet_on() -> bool:
    return ("header_diet" not in _state["settings_off"]
            and os.environ.get("STRATAGEM_BUILD_HEADER_DIET", "").strip().lower() not in ("0", "off", "false", "no"))


def load(*args: Any, **kwargs: Any) -> Any:
    """`torch.utils.cpp_extension.load` (sources in files: not cached), built outside the lock."""
    t0 = time.perf_counter()
    with _building({}) as waited:
        module = _state["original_load"](*args, **kwargs)
    name = str(kwargs.get("name", args[0] if args else "?"))
    EVENTS.append(BuildEvent(name, None, "uncached", time.perf_counter() - t0 - waited[0], waited[0],
                             "load() of source files"))
    return module


def _only_this_arch(a: dict[str, Any]) -> None:
    """`-gencode=arch=compute_90,code=sm_90` on an H200 (the module docstring's flags)."""
    arch = _state["arch"]
    flags = _texts(a.get("extra_cuda_cflags"))
    if arch and a.get("cuda_sources") and not any("arch" in f and "TORCH_EXTENSION_NAME" not in f for f in flags):
        a["extra_cuda_cflags"] = [*flags, f"-gencode=arch=compute_{arch},code=sm_{arch}"]


def _uncacheable(a: dict[str, Any]) -> str | None:
    if a.get("build_directory"):
        return "the call names its own build directory"
    if a.get("extra_include_paths"):
        return "the call names include paths (their files are not part of the key)"
    if a.get("sycl_sources"):
        return "SYCL sources"
    if not a.get("is_python_module", True):
        return "not a Python module"
    return None


def _texts(v: Any) -> list[str]:
    if v is None:
        return []
    return [v] if isinstance(v, str) else [str(x) for x in v]


def build_inputs(a: dict[str, Any]) -> dict[str, Any]:
    """Everything that decides the library a `load_inline` call builds (the cache key's inputs)."""
    funcs = a.get("functions")
    return {
        "name": str(a["name"]),
        "cpp_sources": _texts(a.get("cpp_sources")),
        "cuda_sources": _texts(a.get("cuda_sources")),
        "functions": funcs if isinstance(funcs, dict) else _texts(funcs),
        "extra_cflags": _texts(a.get("extra_cflags")),
        "extra_cuda_cflags": _texts(a.get("extra_cuda_cflags")),
        "extra_ldflags": _texts(a.get("extra_ldflags")),
        "with_cuda": a.get("with_cuda"),
        "with_pytorch_error_handling": bool(a.get("with_pytorch_error_handling", True)),
        "no_implicit_headers": bool(a.get("no_implicit_headers", False)),
        "toolchain": toolchain(bool(a.get("cuda_sources")) or bool(a.get("with_cuda"))),
    }


def toolchain(cuda: bool) -> dict[str, Any]:
    """The versions and settings that decide a build besides its sources (read once)."""
    key = "toolchain_cuda" if cuda else "toolchain"
    if _state.get(key) is None:
        import torch

        env = {"CXX": os.environ.get("CXX", ""), "CC": os.environ.get("CC", ""),
               "CUDAHOSTCXX": os.environ.get("CUDAHOSTCXX", ""), "CUDA_HOME": os.environ.get("CUDA_HOME", ""),
               "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST", "")}
        _state[key] = {
            "torch": torch.__version__, "torch_cuda": torch.version.cuda, "python": sys.version.split()[0],
            "abi": int(torch._C._GLIBCXX_USE_CXX11_ABI), "env": env,
            "cxx": _version_line([os.environ.get("CXX") or "c++", "--version"]),
            "nvcc": _version_line(["nvcc", "--version"], last=True) if cuda else None,
        }
    return _state[key]


def _version_line(cmd: list[str], last: bool = False) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return (out[-1] if last else out[0]) if out else None


def _lock_folder() -> Path:
    cache: BuildCache | None = _state["cache"]
    return cache.root / "locks" if cache is not None else builds.build_root() / ".stratagem-locks"


@contextlib.contextmanager
def _building(a: dict[str, Any]) -> Iterator[list[float]]:
    """Around a build: a machine-wide build slot, the device lock let go, and the
    precompiled header (`_header`). Yields [seconds waited for the slot]."""
    hooks: Hooks = _state["hooks"]
    waited = [0.0]
    with hooks.released(), build_slot(_lock_folder() / "build-slots", concurrent_builds(usable_cores()),
                                      hooks.waiting) as w, _header(a):
        waited[0] = w
        yield waited


@contextlib.contextmanager
def _header(a: dict[str, Any]) -> Iterator[None]:
    """torch keeps one precompiled `torch/extension.h` in its include folder for the flags it
    was last built with, and rebuilds it in place when a call's flags differ. A build that may
    read it holds `pch.lock` shared; a rebuild holds it exclusive, so no compile reads a header
    being rewritten. When the header changed between the two holds (another flag set got
    there first), this build goes without (`use_pch=False`: gcc uses the header only if it
    fits, and the wrapper keeps torch from deleting it)."""
    if not a.get("use_pch"):
        yield
        return
    import torch.utils.cpp_extension as ext

    sign = Path(ext._TORCH_PATH) / "include" / "torch" / "extension.h.sign"
    path = _lock_folder() / "pch.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another flag set's header being built, or builds reading one
            with _state["hooks"].waiting():
                fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            ext._check_and_build_extension_h_precompiler_headers(a.get("extra_cflags"), a.get("extra_include_paths"))
            seen = _read(sign)
        except Exception:
            _state["pch"] = False  # not again in this process
            seen = None
        fcntl.flock(fd, fcntl.LOCK_SH)  # flock converts: others' rebuilds wait for this build
        if seen is None or _read(sign) != seen:
            a["use_pch"] = False
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _pch_usable(a: dict[str, Any]) -> bool:
    """Whether torch can precompile `torch/extension.h` for this call (decided once per process
    except for the call's own flags)."""
    if a.get("no_implicit_headers"):
        return False
    if _state["pch"] is None:
        _state["pch"] = _pch_supported()
    return bool(_state["pch"])


def _pch_supported() -> bool:
    wanted = os.environ.get("STRATAGEM_BUILD_PCH", "").strip().lower()
    if "precompiled_headers" in _state["settings_off"]:
        return False
    if wanted in ("0", "off", "false") or not sys.platform.startswith("linux"):
        return False
    if wanted not in ("1", "on", "true") and not str(_state["device"]).startswith("cuda"):
        return False  # on the CPU device only when asked for: its first build costs a compile
    try:
        import torch.utils.cpp_extension as ext

        folder = Path(ext._TORCH_PATH) / "include" / "torch"
        return os.access(folder, os.W_OK) and bool(ext.check_compiler_is_gcc(ext.get_cxx_compiler()))
    except Exception:
        return False
