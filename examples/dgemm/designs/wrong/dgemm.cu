// A wrong design: the naive kernel with an off-by-one k loop (the last term of every dot product
// is left out). Fast enough, and wrong at every size: check.py rejects it.
#include <cuda_runtime.h>

__global__ void dgemm_wrong(const double* A, const double* B, double* C, int n) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < n && col < n) {
        double acc = 0.0;
        for (int k = 0; k < n - 1; k++) acc = fma(A[(size_t)row * n + k], B[(size_t)k * n + col], acc);
        C[(size_t)row * n + col] = acc;
    }
}

void dgemm(const double* A, const double* B, double* C, int n, cudaStream_t s) {
    dim3 block(16, 16);
    dim3 grid((n + block.x - 1) / block.x, (n + block.y - 1) / block.y);
    dgemm_wrong<<<grid, block, 0, s>>>(A, B, C, n);
}
