// The harness's cuBLAS baseline (problem.toml's [baselines.cublas]; never a design: [forbid]
// rejects cuBLAS in designs). It is built with the same command as a design and timed beside it,
// so every design reports its fraction of cuBLAS per N.
//
// cublasDgemm with the library's default math mode (CUBLAS_DEFAULT_MATH): cuBLAS may and does use
// the FP64 tensor cores (DMMA) of sm_80+/sm_90 for large N. DMMA computes exact FP64 fused
// multiply-adds, so its results are as accurate as the CUDA cores'; it doubles the FP64 peak on an
// H100/H200 (about 67 against 34 TFLOP/s), which is why a design on the CUDA cores alone is capped
// near half of cuBLAS at large N.
//
// The library is loaded at run time (dlopen), not linked: where cuBLAS comes from Python wheels
// (nvidia-cublas, as on the H200 image) there is no unversioned libcublas.so to link against and
// no cublas_v2.h on the compiler's path, so the few declarations needed are written out here and
// the shared library is looked up by its soname, then in the CUDA toolkit, then in the wheels'
// folders. The handle is created once (static) and bound to the harness's stream on every call.
// Any failure is fatal (exit 5) with a message on stderr: the baseline has no fallback.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <glob.h>

#include <cstdio>
#include <cstdlib>

namespace {

typedef struct cublasContext* cublasHandle_t;
typedef int cublasStatus_t;  // CUBLAS_STATUS_SUCCESS == 0
typedef int cublasOperation_t;  // CUBLAS_OP_N == 0
typedef cublasStatus_t (*create_fn)(cublasHandle_t*);
typedef cublasStatus_t (*set_stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*dgemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                   const double*, const double*, int, const double*, int, const double*,
                                   double*, int);

const char* const NAMES[] = {
    "libcublas.so.13",
    "libcublas.so",
    "/usr/local/cuda/lib64/libcublas.so.13",
    "/usr/local/cuda/lib64/libcublas.so",
    "/usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.13",
    "/usr/local/cuda/targets/sbsa-linux/lib/libcublas.so.13",
};
const char* const PATTERNS[] = {
    "/opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13",
    "/opt/*/.venv/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.13",
    "/opt/*/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13",
    "/usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libcublas.so.13",
    "/usr/local/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13",
    "/usr/lib/python3*/dist-packages/nvidia/cu13/lib/libcublas.so.13",
    "/usr/lib/python3/dist-packages/nvidia/cu13/lib/libcublas.so.13",
    "/root/.local/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13",
    "/usr/local/cuda*/lib64/libcublas.so.13",
    "/usr/local/cuda*/targets/*/lib/libcublas.so.13",
};

[[noreturn]] void die(const char* what) {
    fprintf(stderr, "cuBLAS baseline: %s\n", what);
    exit(5);
}

void* open_cublas() {
    const char* own = getenv("DGEMM_CUBLAS_LIBRARY");
    if (own && *own) {
        if (void* h = dlopen(own, RTLD_NOW | RTLD_GLOBAL)) return h;
    }
    for (const char* name : NAMES)
        if (void* h = dlopen(name, RTLD_NOW | RTLD_GLOBAL)) return h;
    for (const char* pattern : PATTERNS) {
        glob_t g;
        if (glob(pattern, 0, nullptr, &g) == 0) {
            for (size_t i = 0; i < g.gl_pathc; i++) {
                if (void* h = dlopen(g.gl_pathv[i], RTLD_NOW | RTLD_GLOBAL)) {
                    fprintf(stderr, "cuBLAS baseline: loaded %s\n", g.gl_pathv[i]);
                    globfree(&g);
                    return h;
                }
            }
        }
        globfree(&g);
    }
    return nullptr;
}

struct Cublas {
    cublasHandle_t handle = nullptr;
    set_stream_fn set_stream = nullptr;
    dgemm_fn gemm = nullptr;
};

Cublas& cublas() {
    static Cublas lib = [] {
        Cublas c;
        void* h = open_cublas();
        if (!h) die("libcublas.so.13 not found (set DGEMM_CUBLAS_LIBRARY to its path)");
        create_fn create = (create_fn)dlsym(h, "cublasCreate_v2");
        c.set_stream = (set_stream_fn)dlsym(h, "cublasSetStream_v2");
        c.gemm = (dgemm_fn)dlsym(h, "cublasDgemm_v2");
        if (!create || !c.set_stream || !c.gemm) die("the library lacks cublasCreate_v2/SetStream_v2/Dgemm_v2");
        if (create(&c.handle) != 0) die("cublasCreate failed");
        return c;
    }();
    return lib;
}

}  // namespace

void dgemm(const double* A, const double* B, double* C, int n, cudaStream_t s) {
    Cublas& c = cublas();
    if (c.set_stream(c.handle, s) != 0) die("cublasSetStream failed");
    const double one = 1.0, zero = 0.0;
    // Row-major C = A B is column-major C^T = B^T A^T: B goes first, no transposes.
    if (c.gemm(c.handle, 0, 0, n, n, n, &one, B, n, A, n, &zero, C, n) != 0) die("cublasDgemm failed");
}
