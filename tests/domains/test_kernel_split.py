"""The split build of `load_inline` CUDA sources (issue 28, item 4): kernels in a unit nvcc
compiles without torch's headers, host code in `main.cpp` with each launch a call of a stub,
and every source it cannot split safely left to the lighter builds, with the reason."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from stratagem.domains.pytorch.build.kernel_split import MARK, STUB_PREFIX, split

RELU = r"""
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
DECL = ["torch::Tensor relu_cuda(torch::Tensor x);"]

# device functions, a struct parameter, a constant, a template kernel launched with a constant,
# and comments and strings holding braces and launch brackets
RICH = r"""
#include <torch/extension.h>
#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor {")
constexpr int BLOCK = 256;
struct Params { int n; float alpha; };

__device__ __forceinline__ float relu(float v) { return v > 0.f ? v : 0.f; }  // "}" <<<

template <int B>
__global__ void __launch_bounds__(B) scale_kernel(const float* __restrict__ x, float* y, Params p) {
    int i = blockIdx.x * B + threadIdx.x;  /* { not a brace */
    if (i < p.n) y[i] = relu(x[i]) * p.alpha;
}

torch::Tensor scale_cuda(torch::Tensor x, double alpha) {
    CHECK_CUDA(x);
    auto y = torch::empty_like(x);
    Params p{(int)x.numel(), (float)alpha};
    const char* note = "k<<<1, 1>>>() in a string";
    scale_kernel<BLOCK><<<(p.n + BLOCK - 1) / BLOCK, BLOCK, 0, 0>>>(x.data_ptr<float>(), y.data_ptr<float>(), p);
    return y;
}
"""


def _units(src: str, cpp: list[str] | None = None, **kw) -> tuple[str, str]:
    got = split([src], DECL if cpp is None else cpp, **kw)
    assert got.skipped is None, got.skipped
    assert got.cuda_sources is not None and got.cpp_sources is not None
    assert got.cpp_sources[0] == "#include <torch/extension.h>"  # first, as torch puts it (its precompiled header)
    return got.cuda_sources[0], "\n".join(got.cpp_sources)


def test_the_kernel_unit_has_no_torch_and_the_host_unit_launches_through_a_stub() -> None:
    kernel, host = _units(RELU)
    assert MARK in kernel and "torch" not in kernel.replace(MARK, "")
    assert "__global__ void relu_kernel" in kernel
    stub = f"void {STUB_PREFIX}relu_kernel(dim3 stratagem_grid, dim3 stratagem_block, size_t stratagem_shmem, " \
           "cudaStream_t stratagem_stream, const float* __restrict__ x, float* __restrict__ y, int n)"
    assert f"{stub} {{" in kernel
    assert "relu_kernel<<<stratagem_grid, stratagem_block, stratagem_shmem, stratagem_stream>>>(x, y, n);" in kernel
    # torch's precompiled header is read only when its include comes first
    assert host.startswith("#include <torch/extension.h>\n")
    assert host.index(DECL[0]) < host.index("torch::Tensor relu_cuda(torch::Tensor x) {")
    assert f"{stub};" in host and "__global__" not in host and "<<<" not in host
    # the same launch: configuration padded with torch's defaults, the arguments as written, once
    assert (f"{STUB_PREFIX}relu_kernel((n + 255) / 256, 256, 0, 0, x.data_ptr<float>(), y.data_ptr<float>(), n);"
            in host)


def test_shared_declarations_reach_both_units_and_device_code_only_the_kernels() -> None:
    kernel, host = _units(RICH, ["torch::Tensor scale_cuda(torch::Tensor x, double alpha);"])
    for both in ("constexpr int BLOCK = 256;", "struct Params { int n; float alpha; };", "#define CHECK_CUDA"):
        assert both in kernel and both in host
    assert "__device__ __forceinline__ float relu" in kernel and "float relu(" not in host
    assert "torch::Tensor scale_cuda(torch::Tensor x, double alpha) {" not in kernel
    assert 'const char* note = "k<<<1, 1>>>() in a string";' in host  # strings are not launches
    # a template kernel launched with a constant: a stub of its own, the argument substituted
    m = re.search(rf"void ({STUB_PREFIX}scale_kernel_\w+)\(dim3 [^)]*Params p\) \{{", kernel)
    assert m is not None
    assert "scale_kernel<BLOCK><<<stratagem_grid, stratagem_block, stratagem_shmem, stratagem_stream>>>(x, y, p);" \
        in kernel
    assert f"{m.group(1)}((p.n + BLOCK - 1) / BLOCK, BLOCK, 0, 0, x.data_ptr<float>(), y.data_ptr<float>(), p);" in host


def test_a_launch_with_a_stream_and_expressions_keeps_every_argument() -> None:
    src = RELU.replace("relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
                       "relu_kernel<<<dim3(n >> 8, 1), dim3(256), 4 * sizeof(float), stream>>>(\n"
                       "        x.data_ptr<float>(), y.data_ptr<float>(), (n < 5 ? n : min_n(n, 3)));")
    src = src.replace("torch::Tensor relu_cuda(torch::Tensor x) {",
                      "static int min_n(int a, int b) { return a < b ? a : b; }\n"
                      "torch::Tensor relu_cuda(torch::Tensor x) {\n    cudaStream_t stream = 0;")
    _kernel, host = _units(src)
    assert (f"{STUB_PREFIX}relu_kernel(dim3(n >> 8, 1), dim3(256), 4 * sizeof(float), stream, "
            "x.data_ptr<float>(), y.data_ptr<float>(), (n < 5 ? n : min_n(n, 3)));") in host
    assert "static int min_n" in host


def test_the_host_code_keeps_the_cuda_sources_optimization_level() -> None:
    _k, host = _units(RELU, cuda_flags=["-O3", "--use_fast_math"])
    assert '#pragma GCC optimize ("O3")' in host
    # for the moved code only: torch's pybind11 module, appended after it, keeps main.cpp's level
    assert host.index("#pragma GCC push_options") < host.index("torch::Tensor relu_cuda(torch::Tensor x) {")
    assert host.rstrip().endswith("#pragma GCC pop_options")
    _k, host = _units(RELU, cuda_flags=["-O3"], cpp_flags=["-O3"])
    assert "#pragma GCC optimize" not in host  # main.cpp already is
    _k, host = _units(RELU)
    assert "#pragma GCC optimize" not in host  # nvcc's host default is gcc's (-O0), as main.cpp's


DISPATCH = r"""
#include <torch/extension.h>
template <typename scalar_t>
__global__ void k(const scalar_t* x, scalar_t* y, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i]; }
torch::Tensor f(torch::Tensor x) {
    auto y = torch::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {
        k<scalar_t><<<1, 256>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel());
    });
    return y;
}
"""
HOST_TEMPLATE = r"""
#include <torch/extension.h>
template <int B> __global__ void k(float* y) { y[threadIdx.x] = B; }
template <int B> static void launch(float* y) { k<B><<<1, B>>>(y); }
torch::Tensor f(torch::Tensor x) {
    if (x.numel() > 1000) launch<128>(x.data_ptr<float>()); else launch<64 + 32>(x.data_ptr<float>());
    return x;
}
"""
LOCAL_CONSTANT = r"""
#include <torch/extension.h>
template <int B> __global__ void k(float* y) { y[threadIdx.x] = B; }
torch::Tensor f(torch::Tensor x) {
    constexpr int BLOCK = 256;
    k<BLOCK><<<1, BLOCK>>>(x.data_ptr<float>());
    return x;
}
"""
ATTRIBUTE = RELU.replace("    int n = x.numel();",
                         "    int n = x.numel();\n    cudaFuncSetAttribute(relu_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 50);")
SYMBOL = RELU.replace("__global__ void relu_kernel", "__constant__ float scale[4];\n__global__ void relu_kernel").replace(
    "    int n = x.numel();", "    int n = x.numel();\n    float h[4] = {1, 2, 3, 4};\n    cudaMemcpyToSymbol(scale, h, sizeof(h));")
HALF = RELU.replace("int i = blockIdx.x", "at::Half h; int i = blockIdx.x")
NAMESPACE = "namespace my {\n" + RELU.replace("#include <torch/extension.h>\n#include <cuda_runtime.h>\n", "") + "}\n"
MACRO = RELU.replace("#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n#define LAUNCH(n, ...) relu_kernel<<<(n + 255) / 256, 256>>>(__VA_ARGS__)")
UNNAMED = RELU.replace("float* __restrict__ y, int n)", "float* __restrict__ y, int)").replace("if (i < n)", "if (i < 4)")
OVERLOADED = RELU + "__global__ void relu_kernel(double* y) { y[0] = 0; }\n"
NOT_DEFINED = RELU.replace("__global__ void relu_kernel(", "__global__ void other_kernel(")
NO_KERNEL = "torch::Tensor f(torch::Tensor x) { return x; }\n"


def test_a_kernel_launched_from_at_dispatch_gets_a_template_stub_for_the_dispatched_types() -> None:
    kernel, host = _units(DISPATCH)
    assert "template <typename scalar_t>\nvoid stratagem_launch_k(dim3" in host  # declared only
    assert f"{STUB_PREFIX}k<scalar_t>(1, 256, 0, 0, x.data_ptr<scalar_t>()" in host
    assert "k<scalar_t><<<stratagem_grid" in kernel
    for t in ("double", "float"):
        assert f"template void {STUB_PREFIX}k<{t}>(dim3 stratagem_grid, dim3 stratagem_block, size_t stratagem_shmem, " \
               f"cudaStream_t stratagem_stream, const {t}* x, {t}* y, int n);" in kernel
    assert "c10" not in kernel
    kernel, _ = _units(DISPATCH.replace("AT_DISPATCH_FLOATING_TYPES(", "AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, "
                                        "at::ScalarType::BFloat16, "))
    assert f"{STUB_PREFIX}k<c10::Half>(" in kernel and f"{STUB_PREFIX}k<c10::BFloat16>(" in kernel
    assert "#include <c10/util/Half.h>" in kernel and "#include <c10/util/BFloat16.h>" in kernel


def test_a_launch_inside_a_host_template_is_instantiated_for_each_explicit_call() -> None:
    kernel, host = _units(HOST_TEMPLATE)
    assert "template <int B>\nvoid stratagem_launch_k(dim3" in host and f"{STUB_PREFIX}k<B>(1, B, 0, 0, y);" in host
    assert f"template void {STUB_PREFIX}k<(128)>(" in kernel and f"template void {STUB_PREFIX}k<(64 + 32)>(" in kernel
    assert "launch<128>" in host and "static void launch" not in kernel


def test_a_host_functions_own_constant_is_the_template_argument() -> None:
    kernel, host = _units(LOCAL_CONSTANT)
    assert "k<(256)><<<stratagem_grid" in kernel
    assert "constexpr int BLOCK = 256;" in host and "<<<" not in host


@pytest.mark.parametrize(("src", "why"), [
    (HOST_TEMPLATE.replace("launch<64 + 32>(", "launch("), "launched with B"),  # deduced: instances unknown
    (HOST_TEMPLATE.replace("launch<64 + 32>(", "launch<N>("), "launched with B"),
    (DISPATCH.replace("AT_DISPATCH_FLOATING_TYPES(", "AT_DISPATCH_ALL_TYPES_AND_COMPLEX("), "launched with scalar_t"),
    (DISPATCH.replace("AT_DISPATCH_FLOATING_TYPES(", "AT_DISPATCH_FLOATING_TYPES_AND(at::kFloat8_e4m3fn, "),
     "launched with scalar_t"),
    (ATTRIBUTE, "device symbol relu_kernel"),
    (SYMBOL, "device symbol scale"),
    (HALF, "device code names torch"),
    (NAMESPACE, "namespace"),
    (MACRO, "macro launches"),
    (UNNAMED, "unnamed parameter"),
    (OVERLOADED, "defined twice"),
    (NOT_DEFINED, "not defined in the source"),
    (NO_KERNEL, "no kernel"),
])
def test_what_is_not_split_safely_is_left_whole_with_the_reason(src: str, why: str) -> None:
    got = split([src], DECL)
    assert got.cuda_sources is None and got.cpp_sources is None
    assert got.skipped is not None and why in got.skipped, got.skipped


def test_several_sources_are_one_unit_as_torch_joins_them() -> None:
    head, rest = RELU.split("torch::Tensor relu_cuda", 1)
    got = split([head, "torch::Tensor relu_cuda" + rest], DECL)
    assert got.skipped is None and got.cuda_sources is not None and got.cpp_sources is not None
    assert "relu_kernel<<<" not in got.cpp_sources[1] and "__global__" in got.cuda_sources[0]


def _symbols(obj: Path, which: str) -> set[str]:
    out = subprocess.run(["nm", "-C", which, str(obj)], capture_output=True, text=True, timeout=60, check=True)
    found = (re.match(r"\s*(?:[0-9a-f]+\s+)?[A-Za-z]\s+(.*)$", line) for line in out.stdout.splitlines())
    return {m.group(1).strip() for m in found if m is not None}


def _torch_include() -> Path:
    import torch.utils.cpp_extension as ext

    return Path(ext._TORCH_PATH) / "include"


def _cuda_include() -> Path | None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    for inc in (Path(nvcc).resolve().parents[1] / "include", Path("/usr/local/cuda/include")):
        if (inc / "cuda_runtime.h").exists():
            return inc
    return None


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(_cuda_include() is None, reason="needs nvcc and the CUDA headers")
def test_nvcc_compiles_the_kernel_units_and_gcc_the_host_units(tmp_path) -> None:
    """With torch's own flags: nvcc compiles each kernel unit without torch's headers, and gcc
    compiles each host unit against torch's `torch/extension.h` (syntax only: the library is
    linked on the GPU machine, benchmarks/compile_throughput.py)."""
    inc = _torch_include()
    cuda = _cuda_include()
    assert cuda is not None
    nvcc_flags = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                  "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr",
                  "--compiler-options", "-fPIC", "-O3", "-gencode=arch=compute_90,code=sm_90", "-std=c++20"]
    nvcc_flags += ["-isystem", str(inc)]  # c10's Half and BFloat16, for dispatched kernels
    gcc_flags = ["-DTORCH_EXTENSION_NAME=split_test", "-DTORCH_API_INCLUDE_EXTENSION_H", "-isystem", str(inc),
                 "-isystem", str(inc / "torch" / "csrc" / "api" / "include"), "-isystem",
                 str(sysconfig.get_path("include")), "-isystem", str(cuda), "-fPIC", "-std=c++20"]
    half = DISPATCH.replace("AT_DISPATCH_FLOATING_TYPES(", "AT_DISPATCH_FLOATING_TYPES_AND_HALF(")
    cases = [("relu", RELU, DECL), ("rich", RICH, ["torch::Tensor scale_cuda(torch::Tensor x, double alpha);"]),
             ("dispatch", half, ["torch::Tensor f(torch::Tensor x);"]),
             ("host_template", HOST_TEMPLATE, ["torch::Tensor f(torch::Tensor x);"]),
             ("local_constant", LOCAL_CONSTANT, ["torch::Tensor f(torch::Tensor x);"])]
    for name, src, cpp in cases:
        kernel, host = _units(src, cpp, cuda_flags=["-O3"])
        cu, cc = tmp_path / f"{name}.cu", tmp_path / f"{name}.cpp"
        cu.write_text(kernel)
        cc.write_text(host)
        out = subprocess.run(["nvcc", *nvcc_flags, "-c", str(cu), "-o", str(tmp_path / f"{name}.o")],
                             capture_output=True, text=True, timeout=600, check=False, env=dict(os.environ))
        assert out.returncode == 0, (name, out.stderr[-3000:])
        out = subprocess.run(["g++", *gcc_flags, "-c", str(cc), "-o", str(tmp_path / f"{name}_host.o")],
                             capture_output=True, text=True, timeout=600, check=False)
        assert out.returncode == 0, (name, out.stderr[-3000:])
        # every stub the host code calls is defined in the kernel unit (the instances included)
        needed = _symbols(tmp_path / f"{name}_host.o", "-u")
        defined = _symbols(tmp_path / f"{name}.o", "--defined-only")
        stubs = {x for x in needed if STUB_PREFIX in x}
        assert stubs and stubs <= defined, (name, stubs - defined)
