"""Pattern 1: the ReLU runs on a private non-blocking stream, so the timed stream's end event
fires before the work is done. Correct outputs (the harness synchronizes before comparing)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <cuda_runtime.h>
__global__ void relu_side(const float* x, float* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; for (int k = 0; k < 4096; ++k) v = v * 1.0000001f + 1e-9f; y[i] = v > 1e30f ? v : (x[i] > 0.f ? x[i] : 0.f); }
}
static cudaStream_t side = nullptr;
void launch_side(const float* x, float* y, long n) {
    if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    relu_side<<<(int)((n + 255) / 256), 256, 0, side>>>(x, y, n);
}
"""
cpp_src = r"""
#include <torch/extension.h>
void launch_side(const float* x, float* y, long n);
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    launch_side(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
ext = load_inline(name="stratagem_cheat_side_stream", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x.contiguous())
