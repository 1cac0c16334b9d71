// An honest design on the FP64 tensor cores (DMMA): the same block tiling as designs/tiled
// (shared-memory tiles, double-buffered, ragged edges zero-filled), but each warp multiplies its
// part of the tiles with mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 instead of scalar FMAs.
// DMMA computes exact FP64 fused multiply-adds: the result is as accurate as the CUDA cores'.
//
// Fragment layouts of m8n8k4 .f64 (PTX ISA; CuTe's MMA_Traits<SM80_8x8x4_F64F64F64F64_TN>), with
// g = lane / 4 and t = lane % 4:
//   A (8x4, row):  one double per lane, A[g][t]
//   B (4x8, col):  one double per lane, B[t][g]
//   C, D (8x8):    two doubles per lane, C[g][2t] and C[g][2t + 1]
// Shared memory: As[m][k] with row stride BK + 4 and Bs[k][n] with row stride BN + 4 (strides of
// 4 or 12 mod 16 doubles), so that the 16 lanes of each half-warp reading a fragment hit 16
// different 8-byte banks.
//
// The code is written for a "warp of LANES lanes": on the GPU LANES = 1 (each thread is its own
// lane, the mma is the PTX instruction); tools/emulate_dmma.cu runs the same block schedule and
// phase functions on the CPU with LANES = 32 and the mma emulated from the layouts above (FMAs in
// k order), and checks the result bit for bit against a triple loop.
#include <cuda_runtime.h>

namespace dmma {

template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int MIN_BLOCKS_>
struct Config {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int MIN_BLOCKS = MIN_BLOCKS_;
    static constexpr int WARPS = WARPS_M * WARPS_N, THREADS = 32 * WARPS;
    static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // one warp's part of the tile
    static constexpr int MI = WM / 8, NI = WN / 8;              // its 8x8 mma tiles
    static constexpr int AS_STRIDE = BK + 4, BS_STRIDE = BN + 4;
    static constexpr int LOADS_A = BM * BK / THREADS, LOADS_B = BK * BN / THREADS;
    static_assert(WM % 8 == 0 && WN % 8 == 0 && BK % 4 == 0, "whole mma tiles");
    static_assert((BM * BK) % THREADS == 0 && (BK * BN) % THREADS == 0, "loads must divide evenly");
    static_assert(AS_STRIDE % 16 == 4 || AS_STRIDE % 16 == 12, "A padding");
    static_assert(BS_STRIDE % 16 == 4 || BS_STRIDE % 16 == 12, "B padding");
};

using Small = Config<32, 32, 16, 2, 2, 4>;    // 128 threads, 16x16 per warp
using Medium = Config<64, 64, 16, 2, 2, 2>;   // 128 threads, 32x32 per warp
using Large = Config<128, 128, 8, 2, 4, 1>;   // 256 threads, 64x32 per warp

// Per thread: its share of the next tiles in flight.
template <class K>
struct ThreadState {
    double ra[K::LOADS_A], rb[K::LOADS_B];
};

// Per warp: the accumulators of its LANES lanes, acc[lane][mi][ni][v].
template <class K, int LANES>
struct WarpState {
    double acc[LANES][K::MI][K::NI][2];
};

// Global -> registers, zero outside the matrix (A: row e / BK, k e % BK; B: k e / BN, col e % BN).
template <class K>
__host__ __device__ inline void load_global(int tid, const double* A, const double* B, int n, int bm, int bn, int k0,
                                            ThreadState<K>& st) {
#pragma unroll
    for (int l = 0; l < K::LOADS_A; l++) {
        int e = tid + l * K::THREADS;
        int r = bm + e / K::BK, c = k0 + e % K::BK;
        st.ra[l] = (r < n && c < n) ? A[(size_t)r * n + c] : 0.0;
    }
#pragma unroll
    for (int l = 0; l < K::LOADS_B; l++) {
        int e = tid + l * K::THREADS;
        int r = k0 + e / K::BN, c = bn + e % K::BN;
        st.rb[l] = (r < n && c < n) ? B[(size_t)r * n + c] : 0.0;
    }
}

template <class K>
__host__ __device__ inline void store_shared(int tid, const ThreadState<K>& st, double* As, double* Bs) {
#pragma unroll
    for (int l = 0; l < K::LOADS_A; l++) {
        int e = tid + l * K::THREADS;
        As[(e / K::BK) * K::AS_STRIDE + e % K::BK] = st.ra[l];
    }
#pragma unroll
    for (int l = 0; l < K::LOADS_B; l++) {
        int e = tid + l * K::THREADS;
        Bs[(e / K::BN) * K::BS_STRIDE + e % K::BN] = st.rb[l];
    }
}

// D = A B + D for one 8x8x4 tile, in place. a[l], b[l]: the fragments of lane lanes[l].
template <class K, int LANES>
__host__ __device__ inline void mma_8x8x4(double (&d)[LANES][K::MI][K::NI][2], int mi, int ni,
                                          const double (&a)[LANES][K::MI], const double (&b)[LANES][K::NI]) {
#ifdef __CUDA_ARCH__
    if constexpr (LANES == 1) {  // the GPU: each thread is one lane
        asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                     : "+d"(d[0][mi][ni][0]), "+d"(d[0][mi][ni][1])
                     : "d"(a[0][mi]), "d"(b[0][ni]));
    } else {
        __trap();
    }
#else
    if constexpr (LANES == 32) {  // the CPU emulation: a whole warp
        for (int lane = 0; lane < 32; lane++) {
            int g = lane / 4, t = lane % 4;
            for (int v = 0; v < 2; v++) {
                int col = 2 * t + v;
                double s = d[lane][mi][ni][v];
                for (int k = 0; k < 4; k++)  // A[g][k] is lane g*4+k's, B[k][col] lane col*4+k's
                    s = __builtin_fma(a[g * 4 + k][mi], b[col * 4 + k][ni], s);
                d[lane][mi][ni][v] = s;
            }
        }
    } else {
        __builtin_trap();
    }
#endif
}

// One warp's work on one buffer: BK / 4 mma steps over its MI x NI tiles. lanes[l] is lane l's id.
template <class K, int LANES>
__host__ __device__ inline void compute_warp(int warp, const int (&lanes)[LANES], const double* As, const double* Bs,
                                             WarpState<K, LANES>& ws) {
    const int wm = (warp / K::WARPS_N) * K::WM, wn = (warp % K::WARPS_N) * K::WN;
#pragma unroll
    for (int ks = 0; ks < K::BK / 4; ks++) {
        double a[LANES][K::MI], b[LANES][K::NI];
#pragma unroll
        for (int l = 0; l < LANES; l++) {
            const int g = lanes[l] / 4, t = lanes[l] % 4;
#pragma unroll
            for (int mi = 0; mi < K::MI; mi++) a[l][mi] = As[(wm + mi * 8 + g) * K::AS_STRIDE + ks * 4 + t];
#pragma unroll
            for (int ni = 0; ni < K::NI; ni++) b[l][ni] = Bs[(ks * 4 + t) * K::BS_STRIDE + wn + ni * 8 + g];
        }
#pragma unroll
        for (int mi = 0; mi < K::MI; mi++)
#pragma unroll
            for (int ni = 0; ni < K::NI; ni++) mma_8x8x4<K, LANES>(ws.acc, mi, ni, a, b);
    }
}

template <class K, int LANES>
__host__ __device__ inline void store_c(int warp, const int (&lanes)[LANES], const WarpState<K, LANES>& ws, double* C,
                                        int n, int bm, int bn) {
    const int wm = (warp / K::WARPS_N) * K::WM, wn = (warp % K::WARPS_N) * K::WN;
#pragma unroll
    for (int l = 0; l < LANES; l++) {
        const int g = lanes[l] / 4, t = lanes[l] % 4;
#pragma unroll
        for (int mi = 0; mi < K::MI; mi++) {
            const int r = bm + wm + mi * 8 + g;
#pragma unroll
            for (int ni = 0; ni < K::NI; ni++) {
#pragma unroll
                for (int v = 0; v < 2; v++) {
                    const int c = bn + wn + ni * 8 + 2 * t + v;
                    if (r < n && c < n) C[(size_t)r * n + c] = ws.acc[l][mi][ni][v];
                }
            }
        }
    }
}

// The block's schedule, shared with the CPU emulation: team.each(f) runs f(tid, thread state) per
// thread, team.each_warp(f) runs f(warp, lanes, warp state) per warp, team.sync() is the barrier.
// Double buffering as in designs/tiled: step t reads buffer t & 1 and fills the other.
#pragma nv_exec_check_disable
template <class K, class Team>
__host__ __device__ inline void block_schedule(Team& team, const double* A, const double* B, double* C, int n,
                                               int bm, int bn, double* As0, double* As1, double* Bs0, double* Bs1) {
    const int steps = (n + K::BK - 1) / K::BK;
    team.each_warp([&](int, auto& lanes, auto& ws) {
        for (int l = 0; l < (int)(sizeof(lanes) / sizeof(lanes[0])); l++)
#pragma unroll
            for (int mi = 0; mi < K::MI; mi++)
#pragma unroll
                for (int ni = 0; ni < K::NI; ni++) ws.acc[l][mi][ni][0] = ws.acc[l][mi][ni][1] = 0.0;
    });
    team.each([&](int tid, ThreadState<K>& st) {
        load_global<K>(tid, A, B, n, bm, bn, 0, st);
        store_shared<K>(tid, st, As0, Bs0);
    });
    team.sync();
    for (int t = 0; t < steps; t++) {
        const bool odd = t & 1, more = t + 1 < steps;
        const double *as_cur = odd ? As1 : As0, *bs_cur = odd ? Bs1 : Bs0;
        double *as_next = odd ? As0 : As1, *bs_next = odd ? Bs0 : Bs1;
        if (more) team.each([&](int tid, ThreadState<K>& st) { load_global<K>(tid, A, B, n, bm, bn, (t + 1) * K::BK, st); });
        team.each_warp([&](int warp, auto& lanes, auto& ws) { compute_warp<K>(warp, lanes, as_cur, bs_cur, ws); });
        if (more) team.each([&](int tid, ThreadState<K>& st) { store_shared<K>(tid, st, as_next, bs_next); });
        team.sync();
    }
    team.each_warp([&](int warp, auto& lanes, auto& ws) { store_c<K>(warp, lanes, ws, C, n, bm, bn); });
}

template <class K>
struct DeviceTeam {
    ThreadState<K> st;
    WarpState<K, 1> ws;
    int lanes[1];
    __device__ DeviceTeam() { lanes[0] = threadIdx.x % 32; }
    template <class F>
    __device__ void each(F&& f) { f((int)threadIdx.x, st); }
    template <class F>
    __device__ void each_warp(F&& f) { f((int)threadIdx.x / 32, lanes, ws); }
    __device__ void sync() { __syncthreads(); }
};

template <class K>
__global__ void __launch_bounds__(K::THREADS, K::MIN_BLOCKS) dgemm_dmma(const double* __restrict__ A,
                                                                       const double* __restrict__ B,
                                                                       double* __restrict__ C, int n) {
    __shared__ double As[2][K::BM * K::AS_STRIDE];
    __shared__ double Bs[2][K::BK * K::BS_STRIDE];
    DeviceTeam<K> team;
    block_schedule<K>(team, A, B, C, n, blockIdx.y * K::BM, blockIdx.x * K::BN, As[0], As[1], Bs[0], Bs[1]);
}

template <class K>
void launch(const double* A, const double* B, double* C, int n, cudaStream_t s) {
    dim3 grid((n + K::BN - 1) / K::BN, (n + K::BM - 1) / K::BM);
    dgemm_dmma<K><<<grid, K::THREADS, 0, s>>>(A, B, C, n);
}

}  // namespace dmma

void dgemm(const double* A, const double* B, double* C, int n, cudaStream_t s) {
    if (n <= 512)
        dmma::launch<dmma::Small>(A, B, C, n, s);
    else if (n < 2048)
        dmma::launch<dmma::Medium>(A, B, C, n, s);
    else
        dmma::launch<dmma::Large>(A, B, C, n, s);
}
