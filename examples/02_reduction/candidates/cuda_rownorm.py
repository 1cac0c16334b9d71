import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

row_l2norm_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cstdint>

// One block per row. Each thread accumulates x*x over a strided slice of the row
// (float4 loads when the row is 16-byte aligned), then the block reduces with warp
// shuffles and a tiny shared-memory stage. The row is read exactly once.
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK)
row_l2norm_kernel(const float* __restrict__ x, float* __restrict__ out,
                  int64_t cols, bool vec4) {
    const int64_t row = blockIdx.x;
    const float* xr = x + row * cols;
    float acc0 = 0.f, acc1 = 0.f;
    if (vec4) {
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        const int64_t n4 = cols >> 2;
#pragma unroll 4
        for (int64_t i = threadIdx.x; i < n4; i += BLOCK) {
            const float4 v = __ldg(xr4 + i);
            acc0 = fmaf(v.x, v.x, acc0);
            acc1 = fmaf(v.y, v.y, acc1);
            acc0 = fmaf(v.z, v.z, acc0);
            acc1 = fmaf(v.w, v.w, acc1);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += BLOCK) {
            const float v = __ldg(xr + i);
            acc0 = fmaf(v, v, acc0);
        }
    }
    float acc = acc0 + acc1;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
    }
    __shared__ float warp_sums[BLOCK / 32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) {
        warp_sums[warp] = acc;
    }
    __syncthreads();
    if (warp == 0) {
        acc = (lane < BLOCK / 32) ? warp_sums[lane] : 0.f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            acc += __shfl_xor_sync(0xffffffffu, acc, off);
        }
        if (lane == 0) {
            out[row] = sqrtf(acc);
        }
    }
}

torch::Tensor row_l2norm_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() == 2, "x must be 2-D (rows, cols)");
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0);
    const int64_t cols = xc.size(1);
    auto out = torch::empty({rows}, xc.options());
    if (rows == 0) {
        return out;
    }
    const float* xp = xc.data_ptr<float>();
    const bool vec4 = (cols % 4 == 0) && (reinterpret_cast<std::uintptr_t>(xp) % 16 == 0);
    constexpr int BLOCK = 256;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    row_l2norm_kernel<BLOCK><<<static_cast<unsigned int>(rows), BLOCK, 0, stream>>>(
        xp, out.data_ptr<float>(), cols, vec4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

row_l2norm_cpp_source = "torch::Tensor row_l2norm_cuda(torch::Tensor x);"

row_l2norm = load_inline(
    name="stratagem_ex02_row_l2norm",
    cpp_sources=row_l2norm_cpp_source,
    cuda_sources=row_l2norm_source,
    functions=["row_l2norm_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    """
    Custom CUDA reduction: one block per row reads the row once with float4 loads and
    reduces in registers, instead of writing and re-reading a full-size x * x temporary.
    """

    def __init__(self):
        super(ModelNew, self).__init__()
        self.row_l2norm = row_l2norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.row_l2norm.row_l2norm_cuda(x)
