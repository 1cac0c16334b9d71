"""Issue 23 on the GPU: Its own kernel runs in the first calls only (the untimed stages), then torch.relu. Strict must fail it."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
__global__ void strict_relu_kernel(const float* __restrict__ in, float* __restrict__ out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    int threads = 256;
    long blocks = (n + threads - 1) / threads;
    strict_relu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
_CPP = "torch::Tensor relu_cuda(torch::Tensor x);"

# one name and source for every cuda_* fixture: one build serves them all
_ext = load_inline(name="strict_relu_cuda", cpp_sources=_CPP, cuda_sources=_CUDA, functions=["relu_cuda"],
                   verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= 3:
            return _ext.relu_cuda(x)
        return torch.relu(x)
