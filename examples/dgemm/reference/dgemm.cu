// The reference design: the naive kernel the AUTO paper starts from, one thread per entry of C,
// the k loop in order with one fused multiply-add per term.
//
// The contract every design keeps (main.cu calls it):
//   void dgemm(const double* A, const double* B, double* C, int n, cudaStream_t s);
//   C = A * B for n x n matrices of doubles stored row-major (A[i * n + k]); A, B and C are device
//   pointers (cudaMalloc'd, 256-byte aligned, not overlapping); any n >= 1 (the problem times
//   128, 256, 512, 1000, 1024, 2048 and 4096). All GPU work goes on stream s (the harness times
//   the call with CUDA events on s); the function may return before the work ends. Each entry of
//   C must be within 2 n 2^-53 sum_k |A[i][k]| |B[k][j]| of the exact product (README.md).
#include <cuda_runtime.h>

__global__ void dgemm_naive(const double* A, const double* B, double* C, int n) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < n && col < n) {
        double acc = 0.0;
        for (int k = 0; k < n; k++) acc = fma(A[(size_t)row * n + k], B[(size_t)k * n + col], acc);
        C[(size_t)row * n + col] = acc;
    }
}

void dgemm(const double* A, const double* B, double* C, int n, cudaStream_t s) {
    dim3 block(16, 16);
    dim3 grid((n + block.x - 1) / block.x, (n + block.y - 1) / block.y);
    dgemm_naive<<<grid, block, 0, s>>>(A, B, C, n);
}
