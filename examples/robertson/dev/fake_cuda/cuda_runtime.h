/* A stand-in for the few CUDA runtime calls main.cu makes, so that the harness can be compiled
 * with a host compiler and run on a machine without a GPU (dev/README.md). Testing only. */
#pragma once
typedef int cudaError_t;
static const cudaError_t cudaSuccess = 0;
static inline cudaError_t cudaFree(void *) { return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline const char *cudaGetErrorString(cudaError_t) { return "no error"; }
