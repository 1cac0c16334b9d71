// A precision downgrade: the naive kernel computing in float32 (inputs rounded to float, float
// accumulation). About 2^29 times less accurate than FP64; the tolerance (2 n 2^-53 sum |a||b|)
// rejects it at every size of the problem (README.md gives the figures).
#include <cuda_runtime.h>

__global__ void dgemm_float32(const double* A, const double* B, double* C, int n) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < n && col < n) {
        float acc = 0.0f;
        for (int k = 0; k < n; k++)
            acc = fmaf((float)A[(size_t)row * n + k], (float)B[(size_t)k * n + col], acc);
        C[(size_t)row * n + col] = (double)acc;
    }
}

void dgemm(const double* A, const double* B, double* C, int n, cudaStream_t s) {
    dim3 block(16, 16);
    dim3 grid((n + block.x - 1) / block.x, (n + block.y - 1) / block.y);
    dgemm_float32<<<grid, block, 0, s>>>(A, B, C, n);
}
