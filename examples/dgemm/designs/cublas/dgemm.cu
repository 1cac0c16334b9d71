// A forbidden design: it hands the product to cuBLAS, which the problem forbids (its include,
// the -lcublas in flags.txt and the cublas* symbols are each caught by [forbid]).
#include <cublas_v2.h>
#include <cuda_runtime.h>

void dgemm(const double* A, const double* B, double* C, int n, cudaStream_t s) {
    static cublasHandle_t handle = nullptr;
    if (!handle) cublasCreate(&handle);
    cublasSetStream(handle, s);
    const double one = 1.0, zero = 0.0;
    // Row-major C = A B is column-major C^T = B^T A^T: pass B first.
    cublasDgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, B, n, A, n, &zero, C, n);
}
