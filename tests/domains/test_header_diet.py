"""The header diet of `load_inline` CUDA sources (issue 28, item 4): `torch/extension.h` in a
`.cu` becomes `torch/types.h`; a source that needs the full headers is left as written, one
that does not compile lightened is built as written, and a lightened and an as-written build
never share a cache entry."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from stratagem.domains.pytorch.build import build_cache, header_diet, inline_builds, kernel_split
from stratagem.domains.pytorch.build.build_cache import BuildCache, key_of
from stratagem.domains.pytorch.build.header_diet import lighten

KERNELBENCH_RELU = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
STREAM_MATMUL = r"""
#include "torch/extension.h"   // quoted, with a comment
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>

template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* x, scalar_t* y, scalar_t s, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}

at::Tensor scale_cuda(at::Tensor x, double s) {
    auto y = at::empty_like(x);
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "scale", [&] {
        scale_kernel<scalar_t><<<(x.numel() + 255) / 256, 256, 0, stream>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), (scalar_t)s, x.numel());
    });
    return y;
}
"""
USES_NN = r"""
#include <torch/extension.h>
namespace F = torch::nn::functional;
torch::Tensor act(torch::Tensor x) { return F::gelu(x); }
"""
DEFINES_MODULE = r"""
#include <torch/extension.h>
torch::Tensor id(torch::Tensor x) { return x; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("id", &id); }
"""


def test_the_full_header_becomes_torch_types_on_the_same_line() -> None:
    diet = lighten([KERNELBENCH_RELU])
    assert diet.sources is not None and diet.removed == ("torch/extension.h",) and diet.skipped is None
    out = diet.sources[0]
    assert "#include <torch/types.h>" in out and "#include <torch/extension.h>" not in out
    assert out.count("\n") == KERNELBENCH_RELU.count("\n")  # error messages keep the user's line numbers
    assert out.splitlines()[2:] == KERNELBENCH_RELU.splitlines()[2:]  # nothing else changed
    assert "#include <cuda_runtime.h>" in out


@pytest.mark.parametrize("line", [
    "#include <torch/extension.h>", '#include "torch/extension.h"', "#include<torch/extension.h>",
    "  #  include <torch/extension.h>  // the torch API", "#include <torch/torch.h>", "#include <torch/all.h>",
])
def test_include_forms(line: str) -> None:
    src = f"{line}\n__global__ void k() {{}}\n"
    diet = lighten([src])
    assert diet.sources is not None, line
    first = diet.sources[0].splitlines()[0]
    assert "<torch/types.h>" in first and "torch/extension.h>" not in first.split("/*")[0]
    if "//" in line:
        assert first.endswith("// the torch API")


@pytest.mark.parametrize("src", [
    "#include <torch/types.h>\n__global__ void k() {}\n",
    "#include <ATen/ATen.h>\n#include <torch/extension_helpers.h>\n",
    "// #include <torch/extension.h>\n__global__ void k() {}\n",  # commented out: nothing to lighten
    '#include <torch/extension.hpp>\n',
])
def test_sources_without_a_heavy_include_are_left_alone(src: str) -> None:
    assert lighten([src]) == header_diet.Diet(None)


def test_a_stream_source_keeps_its_cuda_headers() -> None:
    diet = lighten([STREAM_MATMUL])
    assert diet.sources is not None
    out = diet.sources[0]
    assert "#include <ATen/cuda/CUDAContext.h>" in out and "#include <c10/cuda/CUDAStream.h>" in out
    assert "// quoted, with a comment" in out.splitlines()[1]


@pytest.mark.parametrize("src,named", [
    (USES_NN, "torch::nn"), (DEFINES_MODULE, "PYBIND11_"),
    ("#include <torch/extension.h>\nvoid f() { torch::manual_seed(0); }\n", "torch::manual_seed"),
    ("#include <torch/extension.h>\nnamespace py = pybind11;\n", "pybind11"),
    ("#include <torch/extension.h>\nat::Tensor f(at::Tensor x) { return torch :: fft :: fft(x); }\n",
     "torch :: fft"),
])
def test_sources_that_need_the_full_headers_are_left_as_written(src: str, named: str) -> None:
    diet = lighten([src])
    assert diet.sources is None and diet.removed and diet.skipped is not None and named in diet.skipped


def test_a_mention_in_a_comment_does_not_keep_the_full_headers() -> None:
    src = "#include <torch/extension.h>\n// like torch::nn::functional::relu\n/* PYBIND11_MODULE */\n"
    assert lighten([src]).sources is not None
    message = '#include <torch/extension.h>\nvoid f(bool ok) { TORCH_CHECK(ok, "not a PyTorch CUDA tensor"); }\n'
    assert lighten([message]).sources is not None  # "PyTorch" is no Python API name


@pytest.mark.parametrize("name", ["PyObject* o", "Py_INCREF(o)", "PyErr_SetString(e, m)", "PyGILState_Ensure()"])
def test_python_api_names_keep_the_full_headers(name: str) -> None:
    assert lighten([f"#include <torch/extension.h>\nvoid f() {{ {name}; }}\n"]).sources is None


def test_every_source_of_a_call_is_lightened_or_none() -> None:
    diet = lighten([KERNELBENCH_RELU, "__device__ int two() { return 2; }\n"])
    assert diet.sources is not None and len(diet.sources) == 2 and diet.sources[1].startswith("__device__")
    assert lighten([KERNELBENCH_RELU, USES_NN]).sources is None  # one needs them: the call is built as written


# The wrapper: fallback, cache keys, the switch


def _fake_torch(monkeypatch, tmp_path: Path, fail_light: bool, fail: tuple[str, ...] = (),
                split: bool = False) -> list[str]:
    """torch's load_inline replaced by a fake that 'builds' (writes a library file) and fails on
    the kinds of sources in `fail` (`split`, `lean`, `light`; `fail_light`: lean and light);
    returns the log of what it built. `split`: the split build tried first (off: these tests
    are about the header sets; `test_kernel_split.py` has the split's)."""
    import torch.utils.cpp_extension as ext

    log: list[str] = []
    failing = set(fail) | ({"lean", "light"} if fail_light else set())

    def fake(name, cpp_sources, cuda_sources=None, build_directory=None, no_implicit_headers=False, **_kw):
        text = "\n".join(cuda_sources or [])
        kind = ("split" if kernel_split.MARK in text else "lean" if header_diet.LEAN_MARK in text
                else "light" if "stratagem header diet" in text else "written")
        # torch's own headers left out for lean and split only
        assert (kind in ("lean", "split")) == bool(no_implicit_headers)
        if kind in ("lean", "split"):
            assert cpp_sources[0] == "#include <torch/extension.h>"  # what torch would have put first
        light = kind != "written"
        log.append(kind)
        ext.JIT_EXTENSION_VERSIONER.entries[name] = ("bumped", light)  # torch counts every new source as a version of `name`
        if kind in failing:
            raise RuntimeError("Error building extension 'relu_ext'\nerror: identifier \"std::cout\" is undefined")
        folder = Path(build_directory or tmp_path / "torch-default")
        folder.mkdir(parents=True, exist_ok=True)
        lib = folder / f"{name}.so"
        lib.write_bytes(b"\x7fELF " + text.encode())
        return types.SimpleNamespace(__file__=str(lib), light=light)

    monkeypatch.setenv(build_cache.ENV_VAR, str(tmp_path / "cache"))
    monkeypatch.setenv(inline_builds.PCH_VAR, "0")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.delenv(inline_builds.DIET_VAR, raising=False)
    monkeypatch.setitem(inline_builds._state, "signature", inspect.signature(ext.load_inline))
    monkeypatch.setitem(inline_builds._state, "original", fake)
    monkeypatch.setitem(inline_builds._state, "original_load", fake)
    monkeypatch.setitem(inline_builds._state, "pch", None)
    monkeypatch.setitem(inline_builds._state, "settings_off", frozenset() if split else frozenset({"split_builds"}))
    monkeypatch.setattr(ext, "load_inline", ext.load_inline)
    monkeypatch.setattr(ext, "load", ext.load)
    monkeypatch.setattr(ext, "remove_extension_h_precompiler_headers", ext.remove_extension_h_precompiler_headers)
    monkeypatch.setattr(ext, "_import_module_from_library",
                        lambda module, path, is_python: types.SimpleNamespace(__file__=f"{path}/{module}.so", hit=True))
    monkeypatch.setattr(ext.JIT_EXTENSION_VERSIONER, "entries", dict(ext.JIT_EXTENSION_VERSIONER.entries))
    inline_builds.install("cpu")
    return log


def _load(**kw: Any) -> Any:
    """torch's `load_inline` as a candidate calls it (the wrapper, once installed)."""
    import torch.utils.cpp_extension as ext

    return getattr(ext, "load_inline")(**kw)  # noqa: B009 - torch types it as returning a path


def _call() -> dict:
    return {"name": "relu_ext", "cpp_sources": "torch::Tensor relu_cuda(torch::Tensor x);",
            "cuda_sources": KERNELBENCH_RELU, "functions": ["relu_cuda"], "extra_cuda_cflags": ["-O3"]}


def test_a_lightened_build_is_cached_under_its_own_key(tmp_path, monkeypatch) -> None:

    log = _fake_torch(monkeypatch, tmp_path, fail_light=False)
    module = _load(**_call())
    assert module.light and log == ["lean"]
    event = inline_builds.EVENTS[-1]
    assert event.outcome == "built" and event.header_diet == "lean"
    assert event.to_json()["header_diet"] == "lean"
    written = key_of(inline_builds.build_inputs({**_call(), "cuda_sources": [KERNELBENCH_RELU]}))
    assert event.key is not None and event.key != written  # never the entry of the source as written
    assert BuildCache(tmp_path / "cache").entry(event.key).is_dir()
    assert not BuildCache(tmp_path / "cache").entry(written).exists()
    again = _load(**_call())
    assert again.hit and log == ["lean"]
    assert inline_builds.EVENTS[-1].outcome == "hit" and inline_builds.EVENTS[-1].key == event.key

    monkeypatch.setenv(inline_builds.DIET_VAR, "0")  # the diet off: built as written, its own entry
    assert not _load(**_call()).light and log == ["lean", "written"]
    assert inline_builds.EVENTS[-1].key == written and inline_builds.EVENTS[-1].header_diet is None


def test_a_source_that_does_not_compile_lightened_is_built_as_written(tmp_path, monkeypatch) -> None:
    import torch.utils.cpp_extension as ext

    log = _fake_torch(monkeypatch, tmp_path, fail_light=True)
    ext.JIT_EXTENSION_VERSIONER.entries.pop("relu_ext", None)
    module = _load(**_call())
    assert not module.light and log == ["lean", "light", "written"]
    event = inline_builds.EVENTS[-1]
    assert event.outcome == "built" and event.header_diet is not None and event.header_diet.startswith("fell back")
    assert "Error building extension" in event.header_diet and event.header_diet.endswith("built as written")
    written = key_of(inline_builds.build_inputs({**_call(), "cuda_sources": [KERNELBENCH_RELU]}))
    assert event.key == written  # published as what it is: the source as written
    # the fallback's version of the name is torch's own: the failed attempt was taken back
    assert ext.JIT_EXTENSION_VERSIONER.entries["relu_ext"] == ("bumped", False)
    again = _load(**_call())  # no second failed attempt: the as-written entry is found
    assert again.hit and log == ["lean", "light", "written"]
    assert inline_builds.EVENTS[-1].header_diet == "as written"


def test_a_source_that_does_not_compile_lean_is_built_on_the_diet(tmp_path, monkeypatch) -> None:
    import torch.utils.cpp_extension as ext

    log = _fake_torch(monkeypatch, tmp_path, fail_light=False, fail=("lean",))
    ext.JIT_EXTENSION_VERSIONER.entries.pop("relu_ext", None)
    module = _load(**_call())
    assert module.light and log == ["lean", "light"]
    event = inline_builds.EVENTS[-1]
    assert event.header_diet is not None and event.header_diet.startswith("fell back: the lean source")
    assert event.header_diet.endswith("built lightened")
    light = key_of({**inline_builds.build_inputs({**_call(), "cuda_sources": lighten([KERNELBENCH_RELU]).sources}),
                    "header_diet": header_diet.VERSION})
    assert event.key == light  # published under the diet's key, never the lean one
    assert ext.JIT_EXTENSION_VERSIONER.entries["relu_ext"] == ("bumped", True)
    again = _load(**_call())
    assert again.hit and log == ["lean", "light"] and inline_builds.EVENTS[-1].header_diet == "lightened"


def test_a_torch_without_no_implicit_headers_gets_the_diet(tmp_path, monkeypatch) -> None:
    """An older torch whose `load_inline` always adds its headers: no lean attempt."""
    log = _fake_torch(monkeypatch, tmp_path, fail_light=False)

    def older(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None, extra_cuda_cflags=None,
              extra_ldflags=None, extra_include_paths=None, build_directory=None, verbose=False, with_cuda=None,
              is_python_module=True, with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False):
        raise AssertionError("not called")

    monkeypatch.setitem(inline_builds._state, "signature", inspect.signature(older))
    assert _load(**_call()).light and log == ["light"]


def test_lean_headers_name_the_operators_the_source_uses() -> None:
    have = {"empty_like", "zeros", "matmul", "relu", "add"}
    src = KERNELBENCH_RELU + "torch::Tensor g(torch::Tensor a) { return at::matmul(a, torch::zeros({2})); }\n"
    got = header_diet.lean([src], ["torch::Tensor relu_cuda(torch::Tensor x);"], have.__contains__)
    assert got.operators == ("empty_like", "matmul", "zeros")
    assert got.cuda_sources is not None and got.cpp_sources is not None
    prefix, body = got.cuda_sources
    assert "#include <ATen/ops/matmul.h>" in prefix and "#include <ATen/ops/relu.h>" not in prefix
    assert "#include <torch/extension.h>" not in body.replace(f"/* {header_diet.LEAN_MARK}: #include <torch/extension.h> */", "")
    assert body.count("\n") == src.count("\n")  # the source's own lines keep their numbers
    assert got.cpp_sources == ["#include <torch/extension.h>", "torch::Tensor relu_cuda(torch::Tensor x);"]
    assert "variable_factories" not in prefix  # no autograd factories unless the source asks for them
    using = "using namespace torch;\ntorch::Tensor h(torch::Tensor a) { return relu(add(a, a)); }\n"
    assert header_diet.lean([using], [], have.__contains__).operators == ("add", "relu")
    adl = "at::Tensor h(at::Tensor a) { return relu(a); }\n"  # found by argument-dependent lookup
    assert header_diet.lean([adl], [], have.__contains__).operators == ("relu",)
    grad = "torch::Tensor k(torch::Tensor a) { return torch::zeros({2}, a.options().requires_grad(false)); }\n"
    prefix = header_diet.lean([grad], [], have.__contains__).cuda_sources[0]
    assert "variable_factories" in prefix  # torch::zeros is then torch's own, as in torch/types.h
    assert header_diet.lean([USES_NN], [], have.__contains__).cuda_sources is None  # needs the full headers
    assert header_diet.lean([DEFINES_MODULE], [], have.__contains__).skipped


def test_a_source_that_fails_as_written_too_gets_torchs_error(tmp_path, monkeypatch) -> None:

    _fake_torch(monkeypatch, tmp_path, fail_light=True)

    def broken(name, cpp_sources, cuda_sources=None, **_kw):
        raise RuntimeError("the candidate's own error" if "header diet" not in "".join(cuda_sources or []) else "light")

    monkeypatch.setitem(inline_builds._state, "original", broken)
    with pytest.raises(RuntimeError, match="the candidate's own error"):
        _load(**_call())


def test_a_skipped_source_says_why(tmp_path, monkeypatch) -> None:

    log = _fake_torch(monkeypatch, tmp_path, fail_light=False)
    _load(**{**_call(), "cuda_sources": USES_NN})
    assert log == ["written"]  # neither lean nor lightened
    note = inline_builds.EVENTS[-1].header_diet
    assert note is not None and note.startswith("skipped") and "torch::nn" in note


def _torch_include() -> Path:
    import torch.utils.cpp_extension as ext

    return Path(ext._TORCH_PATH) / "include"


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_compiles_the_lightened_kernelbench_sources(tmp_path) -> None:
    """nvcc with torch's own flags compiles the lightened and the lean sources (tensor
    operators, factories and dtype constants included), and a source that needs what
    the diet removed fails, which is the wrapper's cue to build it as written. The sources
    that include torch's CUDA headers are compiled only where those headers are whole (a CUDA
    build of torch and the CUDA math libraries' headers)."""
    inc = _torch_include()
    if not (inc / "ATen" / "cuda" / "CUDAContext.h").exists():
        pytest.skip("torch's include folder has no ATen/cuda headers")
    import sysconfig

    flags = ["-DTORCH_EXTENSION_NAME=diet_test", "-DTORCH_API_INCLUDE_EXTENSION_H",
             "-isystem", str(inc), "-isystem", str(inc / "torch" / "csrc" / "api" / "include"),
             "-isystem", str(sysconfig.get_path("include")), "-D__CUDA_NO_HALF_OPERATORS__",
             "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
             "--expt-relaxed-constexpr", "--compiler-options", "-fPIC", "-O3",
             "-gencode=arch=compute_90,code=sm_90", "-std=c++20"]
    prefix = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"  # load_inline's
    needs_more = ("#include <torch/extension.h>\n"  # nn:: without torch:: in front: the check misses it
                  "torch::Tensor f(torch::Tensor x) { using namespace torch; return nn::functional::relu(x); }\n")
    example = (Path(__file__).resolve().parents[2] / "examples/02_reduction/candidates/cuda_rownorm.py").read_text()
    rownorm = example.split('row_l2norm_source = r"""', 1)[1].split('"""', 1)[0]  # c10/cuda streams, checks
    # the stream sources need torch's CUDA headers whole: a CPU build of torch lacks c10/cuda's
    # generated cuda_cmake_macros.h, and ATen/cuda/CUDAContext.h includes the CUDA math
    # libraries' headers (cuBLAS, cuSPARSE), which a bare nvcc install may lack
    libs = (inc / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists() and subprocess.run(
        ["nvcc", "-E", "-x", "cu", "-", "-o", os.devnull], input="#include <cusparse.h>\n",
        capture_output=True, text=True, timeout=300, check=False).returncode == 0
    cases = [("relu", KERNELBENCH_RELU, True), ("stream", STREAM_MATMUL, True), ("rownorm", rownorm, True),
             ("needs_more", needs_more, False)]
    ops = inc / "ATen" / "ops"
    tensor_ops = ("torch::Tensor more(torch::Tensor a) {\n  auto z = torch::zeros({a.size(0)}, a.options().dtype(torch::kFloat32));\n"
                  "  return (a * 2 + z).contiguous();\n}\n")
    cases.append(("tensor_ops", KERNELBENCH_RELU + tensor_ops, True))
    for name, src, ok in cases:
        if name in ("stream", "rownorm") and not libs:
            continue
        diet = lighten([src])
        lean = header_diet.lean([src], [], lambda n: (ops / f"{n}.h").is_file())
        assert lean.cuda_sources is not None
        texts = [(f"{name}_lean", "\n".join(lean.cuda_sources))]
        if diet.sources is not None:
            texts.append((name, prefix + diet.sources[0]))
        for label, text in texts:
            cu = tmp_path / f"{label}.cu"
            cu.write_text(text)
            out = subprocess.run(["nvcc", *flags, "-c", str(cu), "-o", str(tmp_path / f"{label}.o")],
                                 capture_output=True, text=True, timeout=1500, check=False,
                                 env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
            assert (out.returncode == 0) is ok, (label, out.stderr[-3000:])


def test_the_diet_switch_reaches_the_sandboxed_worker() -> None:
    """A user's `STRATAGEM_BUILD_HEADER_DIET=0` survives the sandbox's environment scrub (else the
    documented switch would do nothing in the worker that builds)."""
    from stratagem.domains import get_domain
    from stratagem.evaluation.isolation import scrub_environment

    keep = get_domain("pytorch").worker.keep_env  # what the PyTorch worker's requests keep
    assert scrub_environment({"STRATAGEM_BUILD_HEADER_DIET": "0"}, keep) == {"STRATAGEM_BUILD_HEADER_DIET": "0"}
    assert scrub_environment({"STRATAGEM_BUILD_PCH": "0"}, keep) == {"STRATAGEM_BUILD_PCH": "0"}
    assert scrub_environment({"STRATAGEM_BUILD_PCH": "0"}) == {}  # another domain's worker does not get it


def test_the_split_build_is_tried_first_and_cached_under_its_own_key(tmp_path, monkeypatch) -> None:
    """The split build (`kernel_split.py`) before lean headers, under its own cache entry."""
    log = _fake_torch(monkeypatch, tmp_path, fail_light=False, split=True)
    assert _load(**_call()) and log == ["split"]
    event = inline_builds.EVENTS[-1]
    assert event.outcome == "built" and event.header_diet == "split"
    lean = key_of({**inline_builds.build_inputs({**_call(), **_leaned_call()}), "header_diet": "lean-1"})
    assert event.key != lean
    assert _load(**_call()).hit and log == ["split"] and inline_builds.EVENTS[-1].key == event.key


def _leaned_call() -> dict:
    ops = lambda _n: False  # noqa: E731
    got = header_diet.lean([KERNELBENCH_RELU], [_call()["cpp_sources"]], ops)
    return {"cuda_sources": got.cuda_sources, "cpp_sources": got.cpp_sources, "no_implicit_headers": True}


def test_a_split_that_does_not_compile_is_built_lean(tmp_path, monkeypatch) -> None:
    import torch.utils.cpp_extension as ext

    log = _fake_torch(monkeypatch, tmp_path, fail_light=False, fail=("split",), split=True)
    ext.JIT_EXTENSION_VERSIONER.entries.pop("relu_ext", None)
    assert _load(**_call()).light and log == ["split", "lean"]
    note = inline_builds.EVENTS[-1].header_diet
    assert note is not None and note.startswith("fell back: the split source did not build") and note.endswith("built lean")
    assert _load(**_call()).hit and log == ["split", "lean"]  # the lean entry found: no second failed split


def test_a_source_that_is_not_split_says_why_beside_what_built(tmp_path, monkeypatch) -> None:
    log = _fake_torch(monkeypatch, tmp_path, fail_light=False, split=True)
    named = KERNELBENCH_RELU.replace(  # the kernel named other than by a launch: not split
        "    int n = x.numel();", "    int n = x.numel();\n    cudaFuncSetAttribute(relu_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 50);")
    _load(**{**_call(), "cuda_sources": named})
    assert log == ["lean"]
    note = inline_builds.EVENTS[-1].header_diet
    assert note is not None and note.startswith("lean (not split: host code uses the device symbol relu_kernel")


def test_split_builds_off_goes_straight_to_lean(tmp_path, monkeypatch) -> None:
    log = _fake_torch(monkeypatch, tmp_path, fail_light=False, split=True)
    inline_builds.apply_settings({"split_builds": False})
    _load(**_call())
    assert log == ["lean"] and inline_builds.EVENTS[-1].header_diet == "lean"
