import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

dwconv_relu_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cstdint>

constexpr int TILE_W = 32;
constexpr int TILE_H = 32;
constexpr int THREADS_X = 32;
constexpr int THREADS_Y = 8;
constexpr int NTHREADS = THREADS_X * THREADS_Y;
constexpr int ROWS_PER_THREAD = TILE_H / THREADS_Y;

// Each block computes a TILE_H x TILE_W output tile of one (n, c) plane.
// The (TILE_H + K - 1) x (TILE_W + K - 1) input patch (zero padded at the image
// border) is staged in shared memory once; the K*K filter taps and the bias live in
// registers; bias and ReLU are applied before the single store.
template <int K>
__global__ void __launch_bounds__(NTHREADS)
dwconv_bias_relu_kernel(const float* __restrict__ x,
                        const float* __restrict__ w,
                        const float* __restrict__ b,
                        float* __restrict__ y,
                        int C, int H, int W, int tiles_x, int tiles_y) {
    constexpr int PAD = K / 2;
    constexpr int SW = TILE_W + K - 1;
    constexpr int SH = TILE_H + K - 1;
    __shared__ float patch[SH][SW];

    const int64_t tiles_per_plane = static_cast<int64_t>(tiles_x) * tiles_y;
    const int64_t bid = blockIdx.x;
    const int64_t plane = bid / tiles_per_plane;
    const int tile = static_cast<int>(bid - plane * tiles_per_plane);
    const int ox0 = (tile % tiles_x) * TILE_W;
    const int oy0 = (tile / tiles_x) * TILE_H;
    const int c = static_cast<int>(plane % C);

    const int64_t plane_size = static_cast<int64_t>(H) * W;
    const float* xp = x + plane * plane_size;
    float* yp = y + plane * plane_size;

    const int tid = threadIdx.y * THREADS_X + threadIdx.x;
    for (int i = tid; i < SH * SW; i += NTHREADS) {
        const int ly = i / SW;
        const int lx = i - ly * SW;
        const int gy = oy0 - PAD + ly;
        const int gx = ox0 - PAD + lx;
        float v = 0.f;
        if (gy >= 0 && gy < H && gx >= 0 && gx < W) {
            v = __ldg(xp + static_cast<int64_t>(gy) * W + gx);
        }
        patch[ly][lx] = v;
    }

    float wr[K * K];
#pragma unroll
    for (int i = 0; i < K * K; ++i) {
        wr[i] = __ldg(w + c * K * K + i);
    }
    const float bias = __ldg(b + c);
    __syncthreads();

    const int ox = ox0 + threadIdx.x;
#pragma unroll
    for (int r = 0; r < ROWS_PER_THREAD; ++r) {
        const int ly = threadIdx.y + r * THREADS_Y;
        const int oy = oy0 + ly;
        float acc = bias;
#pragma unroll
        for (int ky = 0; ky < K; ++ky) {
#pragma unroll
            for (int kx = 0; kx < K; ++kx) {
                acc = fmaf(patch[ly + ky][threadIdx.x + kx], wr[ky * K + kx], acc);
            }
        }
        if (oy < H && ox < W) {
            // ReLU that propagates NaN like torch.relu
            yp[static_cast<int64_t>(oy) * W + ox] = (acc < 0.f) ? 0.f : acc;
        }
    }
}

template <int K>
static void launch_dwconv(const torch::Tensor& x, const torch::Tensor& w,
                          const torch::Tensor& b, torch::Tensor& y) {
    const int N = static_cast<int>(x.size(0));
    const int C = static_cast<int>(x.size(1));
    const int H = static_cast<int>(x.size(2));
    const int W = static_cast<int>(x.size(3));
    const int tiles_x = (W + TILE_W - 1) / TILE_W;
    const int tiles_y = (H + TILE_H - 1) / TILE_H;
    const int64_t blocks = static_cast<int64_t>(N) * C * tiles_x * tiles_y;
    TORCH_CHECK(blocks < 2147483647LL, "input too large for this kernel");
    dim3 block(THREADS_X, THREADS_Y);
    dim3 grid(static_cast<unsigned int>(blocks));
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    dwconv_bias_relu_kernel<K><<<grid, block, 0, stream>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
        y.data_ptr<float>(), C, H, W, tiles_x, tiles_y);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor dwconv_bias_relu_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "tensors must be CUDA");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32, "tensors must be float32");
    TORCH_CHECK(x.dim() == 4, "x must be NCHW");
    TORCH_CHECK(weight.dim() == 4 && weight.size(1) == 1 && weight.size(0) == x.size(1) &&
                weight.size(2) == weight.size(3), "weight must be (C, 1, K, K)");
    TORCH_CHECK(bias.numel() == x.size(1), "bias must have C elements");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto y = torch::empty_like(xc);
    if (xc.numel() == 0) {
        return y;
    }
    const int64_t K = wc.size(2);
    if (K == 3) {
        launch_dwconv<3>(xc, wc, bc, y);
    } else if (K == 5) {
        launch_dwconv<5>(xc, wc, bc, y);
    } else if (K == 7) {
        launch_dwconv<7>(xc, wc, bc, y);
    } else {
        TORCH_CHECK(false, "kernel_size must be 3, 5 or 7");
    }
    return y;
}
"""

dwconv_relu_cpp_source = (
    "torch::Tensor dwconv_bias_relu_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias);"
)

dwconv_relu = load_inline(
    name="stratagem_ex05_dwconv_bias_relu",
    cpp_sources=dwconv_relu_cpp_source,
    cuda_sources=dwconv_relu_source,
    functions=["dwconv_bias_relu_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    """
    Depthwise conv + bias + ReLU in one CUDA kernel: shared-memory input tiles with a
    K-1 halo, filter taps in registers, ReLU applied before the single store. Eager
    PyTorch runs its generic depthwise kernel (fp32 NCHW does not go to cuDNN) and then
    a separate ReLU kernel over the full output.
    """

    def __init__(self, channels: int, kernel_size: int):
        super(ModelNew, self).__init__()
        # nn.Conv2d used only as parameter storage, so weight/bias initialize exactly
        # like the reference; the computation is the custom kernel below.
        self.conv = nn.Conv2d(
            channels,
            channels,
            kernel_size,
            stride=1,
            padding=kernel_size // 2,
            groups=channels,
            bias=True,
        )
        self.dwconv_relu = dwconv_relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dwconv_relu.dwconv_bias_relu_cuda(x, self.conv.weight, self.conv.bias)
