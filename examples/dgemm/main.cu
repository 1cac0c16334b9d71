// The dgemm problem's harness (a fixed file: a design may not change it).
//
// Usage: ./prog SEED [N,N,...]
//   SEED  the evaluation's hidden seed (1 .. 2^31-1)
//   N,... optional list of sizes, for trying the program by hand; the problem runs the default
//         list below (the objective's cases), and check.py requires that list.
//
// For every size N, one after the other, in one process (one CUDA context):
//   * calls t = 0 .. WARMUP + REPS - 1 each get FRESH inputs: A and B (N x N, row-major) filled on
//     the device from (SEED, N, t) by the counter-based generator below, uniform in [-1, 1);
//     C is filled with NaN (all bits set) before every call, so an entry a design leaves unwritten
//     is caught;
//   * each call is timed by two CUDA events recorded on the stream handed to dgemm(), around the
//     dgemm() call alone (kernel time); the host's wall time around the call (device synchronised
//     before and after) is kept too, so that GPU work a design hides on another stream shows up;
//   * after every call, outside the timed region, a Freivalds check on the device compares C v with
//     A (B v) for a seed-derived vector v, A and B regenerated on the fly from the generator (not
//     read back from the buffers a design was handed): every call must compute the product;
//   * the median event time over the REPS timed calls is the size's time.
// Output:
//   stdout, one JSON line: {"time_ms": {"128": T, ...}, "wall_ms": {...}, "gflops": {...}}
//   c.bin: per size, a header of 8 little-endian 64-bit words
//            [MAGIC, N, input_id, check_failures, reps, warmup, event_median_ms (double),
//             wall_median_ms (double)]
//          then the N*N doubles of C (row-major) from the last timed call, whose inputs are those
//          of call input_id = WARMUP + REPS - 1. check.py regenerates that call's A and B and checks
//          every entry (docs: README.md).
//
// The generator (check.py has the same one, in numpy):
//   mix64(z)       = the splitmix64 finaliser
//   key(s, n, t, w)= mix64(mix64(mix64(s + G) ^ n) ^ ((t << 8) | w)),  G = 0x9E3779B97F4A7C15,
//                    w = 0 for A, 1 for B, 2 for the device check's vector v
//   value(key, i)  = (mix64(key + (i + 1) * G) >> 11) * 2^-52 - 1     (exact in double, in [-1, 1))
//   A[r][c]        = value(key(s, n, t, 0), r * n + c); likewise B with w = 1; v[i] = value(key(.., 2), i)

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// The design's entry point (dgemm.cu): C = A * B for n x n row-major matrices of doubles, all three
// device pointers (cudaMalloc'd, 256-byte aligned, not overlapping), work queued on stream s.
void dgemm(const double* A, const double* B, double* C, int n, cudaStream_t s);

namespace dgemm_harness {

constexpr uint64_t GOLDEN = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t MAGIC = 0x4D4D4547443A5453ULL;  // "ST:DGEMM" read little-endian

__host__ __device__ inline uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return z;
}

__host__ __device__ inline uint64_t stream_key(uint64_t seed, uint64_t n, uint64_t call, uint64_t which) {
    return mix64(mix64(mix64(seed + GOLDEN) ^ n) ^ ((call << 8) | which));
}

__host__ __device__ inline double gen_value(uint64_t key, uint64_t idx) {
    uint64_t x = mix64(key + (idx + 1) * GOLDEN);
    return (double)(x >> 11) * 0x1.0p-52 - 1.0;
}

struct SizePlan {
    int n, warmup, reps;
};

// Sizes and repetitions. Chosen so that a whole run of the naive reference (one thread per entry,
// about 0.5 - 2 TFLOP/s in FP64 on an H200) takes a few seconds: at N = 4096 each call is
// 137 GFLOP, i.e. 70 - 270 ms, times 6 calls.
constexpr SizePlan PLANS[] = {
    {128, 5, 30}, {256, 5, 30}, {512, 3, 20}, {1000, 2, 15}, {1024, 2, 15}, {2048, 1, 7}, {4096, 1, 5},
};

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__,      \
                    __LINE__, cudaGetErrorString(err_));                                           \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

__global__ void fill_kernel(double* out, size_t count, uint64_t key) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        out[i] = gen_value(key, i);
}

// One warp per row i: y[i] = sum_k M[i][k] x[k] and ya[i] = sum_k |M[i][k]| xa[k], where M is
// either generated from `key` (mat == nullptr) or read from `mat` (row-major, n x n).
__global__ void matvec_kernel(const double* mat, uint64_t key, int n, const double* x, const double* xa,
                              double* y, double* ya) {
    int warps_per_block = blockDim.x / 32;
    int row = blockIdx.x * warps_per_block + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n) return;
    double s = 0.0, sa = 0.0;
    for (int k = lane; k < n; k += 32) {
        size_t idx = (size_t)row * n + k;
        double m = mat ? mat[idx] : gen_value(key, idx);
        s = fma(m, x[k], s);
        sa = fma(fabs(m), xa[k], sa);
    }
    for (int off = 16; off > 0; off >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, off);
        sa += __shfl_down_sync(0xffffffffu, sa, off);
    }
    if (lane == 0) {
        y[row] = s;
        ya[row] = sa;
    }
}

__global__ void vector_kernel(double* v, double* va, int n, uint64_t key) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        double x = gen_value(key, (uint64_t)i);
        v[i] = x;
        va[i] = fabs(x);
    }
}

// |y - z| <= 2 n u (ya + 3 za) + tiny on every row (see README.md: the Freivalds bound for a C
// within the problem's tolerance, with the rounding of the three products); NaN fails.
__global__ void compare_kernel(const double* y, const double* ya, const double* z, const double* za, int n,
                               unsigned long long* failures) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double u = 0x1.0p-53;
    double tol = 1.01 * 2.0 * n * u * (ya[i] + 3.0 * za[i]) + 1e-300;
    double d = fabs(y[i] - z[i]);
    if (!(d <= tol)) atomicAdd(failures, 1ULL);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int run(uint64_t seed, const std::vector<SizePlan>& plans) {
    int max_n = 0;
    for (const auto& p : plans) max_n = std::max(max_n, p.n);
    size_t max_elems = (size_t)max_n * max_n;
    double *dA, *dB, *dC, *vec;
    unsigned long long* dFail;
    CUDA_OK(cudaMalloc(&dA, max_elems * sizeof(double)));
    CUDA_OK(cudaMalloc(&dB, max_elems * sizeof(double)));
    CUDA_OK(cudaMalloc(&dC, max_elems * sizeof(double)));
    CUDA_OK(cudaMalloc(&vec, 8 * (size_t)max_n * sizeof(double)));
    CUDA_OK(cudaMalloc(&dFail, sizeof(unsigned long long)));
    double *v = vec, *va = vec + max_n, *w = vec + 2 * max_n, *wa = vec + 3 * max_n;
    double *z = vec + 4 * max_n, *za = vec + 5 * max_n, *y = vec + 6 * max_n, *ya = vec + 7 * max_n;

    // A blocking stream: work a design queues on the legacy default stream is ordered with it.
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    cudaEvent_t ev0, ev1;
    CUDA_OK(cudaEventCreate(&ev0));
    CUDA_OK(cudaEventCreate(&ev1));

    FILE* out = fopen("c.bin", "wb");
    if (!out) {
        perror("c.bin");
        return 4;
    }
    std::vector<double> hostC;
    std::string times = "{", walls = "{", rates = "{";
    for (size_t pi = 0; pi < plans.size(); pi++) {
        const SizePlan& p = plans[pi];
        const int n = p.n;
        const size_t elems = (size_t)n * n;
        const int calls = p.warmup + p.reps;
        std::vector<double> ev_ms, wall_ms;
        CUDA_OK(cudaMemsetAsync(dFail, 0, sizeof(unsigned long long), s));
        const int threads = 256, fill_blocks = 132 * 8;
        const int mv_blocks = (n + threads / 32 - 1) / (threads / 32), vec_blocks = (n + threads - 1) / threads;
        for (int t = 0; t < calls; t++) {
            uint64_t ka = stream_key(seed, n, t, 0), kb = stream_key(seed, n, t, 1), kv = stream_key(seed, n, t, 2);
            fill_kernel<<<fill_blocks, threads, 0, s>>>(dA, elems, ka);
            fill_kernel<<<fill_blocks, threads, 0, s>>>(dB, elems, kb);
            CUDA_OK(cudaMemsetAsync(dC, 0xFF, elems * sizeof(double), s));
            CUDA_OK(cudaGetLastError());
            CUDA_OK(cudaDeviceSynchronize());

            auto h0 = std::chrono::steady_clock::now();
            CUDA_OK(cudaEventRecord(ev0, s));
            dgemm(dA, dB, dC, n, s);
            CUDA_OK(cudaEventRecord(ev1, s));
            CUDA_OK(cudaDeviceSynchronize());
            auto h1 = std::chrono::steady_clock::now();
            CUDA_OK(cudaGetLastError());
            float ms = 0.0f;
            CUDA_OK(cudaEventElapsedTime(&ms, ev0, ev1));
            if (t >= p.warmup) {
                ev_ms.push_back(ms);
                wall_ms.push_back(std::chrono::duration<double, std::milli>(h1 - h0).count());
            }

            // The check of this call, untimed: C v against A (B v), A and B regenerated.
            vector_kernel<<<vec_blocks, threads, 0, s>>>(v, va, n, kv);
            matvec_kernel<<<mv_blocks, threads, 0, s>>>(nullptr, kb, n, v, va, w, wa);
            matvec_kernel<<<mv_blocks, threads, 0, s>>>(nullptr, ka, n, w, wa, z, za);
            matvec_kernel<<<mv_blocks, threads, 0, s>>>(dC, 0, n, v, va, y, ya);
            compare_kernel<<<vec_blocks, threads, 0, s>>>(y, ya, z, za, n, dFail);
            CUDA_OK(cudaGetLastError());
        }
        unsigned long long failures = 0;
        CUDA_OK(cudaMemcpyAsync(&failures, dFail, sizeof(failures), cudaMemcpyDeviceToHost, s));
        hostC.resize(elems);
        CUDA_OK(cudaMemcpyAsync(hostC.data(), dC, elems * sizeof(double), cudaMemcpyDeviceToHost, s));
        CUDA_OK(cudaStreamSynchronize(s));
        double ev_med = median(ev_ms), wall_med = median(wall_ms);
        uint64_t header[8] = {MAGIC, (uint64_t)n, (uint64_t)(calls - 1), failures, (uint64_t)p.reps,
                              (uint64_t)p.warmup, 0, 0};
        memcpy(&header[6], &ev_med, sizeof(double));
        memcpy(&header[7], &wall_med, sizeof(double));
        if (fwrite(header, sizeof(header), 1, out) != 1 || fwrite(hostC.data(), sizeof(double), elems, out) != elems) {
            perror("c.bin");
            return 4;
        }
        if (failures)
            fprintf(stderr, "N=%d: %llu rows failed the on-device Freivalds check over %d calls\n", n, failures, calls);
        char buf[96];
        const char* sep = pi ? ", " : "";
        snprintf(buf, sizeof buf, "%s\"%d\": %.9g", sep, n, ev_med);
        times += buf;
        snprintf(buf, sizeof buf, "%s\"%d\": %.9g", sep, n, wall_med);
        walls += buf;
        snprintf(buf, sizeof buf, "%s\"%d\": %.1f", sep, n, 2.0 * n * (double)n * n / (ev_med * 1e6));
        rates += buf;
    }
    if (fclose(out) != 0) {
        perror("c.bin");
        return 4;
    }
    printf("{\"time_ms\": %s}, \"wall_ms\": %s}, \"gflops\": %s}}\n", times.c_str(), walls.c_str(), rates.c_str());
    fflush(stdout);
    return 0;
}

}  // namespace dgemm_harness

#ifndef DGEMM_HARNESS_NO_MAIN
int main(int argc, char** argv) {
    using namespace dgemm_harness;
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s SEED [N,N,...]\n", argv[0]);
        return 2;
    }
    char* end = nullptr;
    unsigned long long seed = strtoull(argv[1], &end, 10);
    if (!*argv[1] || *end) {
        fprintf(stderr, "SEED must be a decimal integer\n");
        return 2;
    }
    std::vector<SizePlan> plans(std::begin(PLANS), std::end(PLANS));
    if (argc == 3) {
        plans.clear();
        for (char* tok = strtok(argv[2], ","); tok; tok = strtok(nullptr, ",")) {
            int n = atoi(tok);
            if (n < 1 || n > 16384) {
                fprintf(stderr, "bad size %s\n", tok);
                return 2;
            }
            SizePlan plan{n, 2, 10};
            for (const auto& q : PLANS)
                if (q.n == n) plan = q;
            plans.push_back(plan);
        }
    }
    return run(seed, plans);
}
#endif
