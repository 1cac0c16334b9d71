"""A `load_inline` CUDA ReLU (an honest design: every call runs its own kernel), for
`benchmarks/throughput.py`'s first evaluation on a fresh build cache (issue 60)."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
__global__ void bench_relu_kernel(const float* __restrict__ in, float* __restrict__ out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    int threads = 256;
    long blocks = (n + threads - 1) / threads;
    bench_relu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
_CPP = "torch::Tensor relu_cuda(torch::Tensor x);"

_ext = load_inline(name="bench_relu_inline", cpp_sources=_CPP, cuda_sources=_CUDA, functions=["relu_cuda"],
                   verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.relu_cuda(x)
