// The tiled design (designs/tiled/dgemm.cu) as a template for --policy tune (docs/tune.md): the
// tile shape used for n >= 512 (where the fraction of cuBLAS is measured) is a point of the space
// below; n < 512 keeps the tiled design's 32x32 tile. The kernel is the tiled design's, unchanged:
// shared-memory tiles of BM x BK (A, stored transposed and padded) and BK x BN (B), double-buffered;
// each of the (BM / TM) x (BN / TN) threads keeps a TM x TN block of C in registers; ragged edges
// zero-filled and guarded. Every point the constraints admit is a configuration its index math
// supports (the Config static_asserts, restated as constraints so no point fails to compile):
//   * whole warps, 64 to 512 threads (BM / TM x BN / TN);
//   * each thread loads the same number of A and B elements ((BM x BK) and (BK x BN) divide by
//     the threads);
//   * the double-buffered tiles fit the 48 KiB of static shared memory;
//   * __launch_bounds__' resident blocks fit the SM's 2048 threads.
// stratagem: param BM = pow2(32, 128)
// stratagem: param BN = pow2(32, 128)
// stratagem: param BK = choice(8, 16, 32)
// stratagem: param TM = pow2(2, 8)
// stratagem: param TN = pow2(2, 8)
// stratagem: param MIN_BLOCKS = choice(1, 2)
// stratagem: require (BM // TM) * (BN // TN) in (64, 128, 256, 512)
// stratagem: require (BM * BK) % ((BM // TM) * (BN // TN)) == 0 and (BK * BN) % ((BM // TM) * (BN // TN)) == 0
// stratagem: require 2 * 8 * BK * (BM + 16 // BK + BN) <= 48 * 1024
// stratagem: require (BM // TM) * (BN // TN) * MIN_BLOCKS <= 2048
#include <cuda_runtime.h>

namespace tiled {

template <int BM_, int BN_, int BK_, int TM_, int TN_, int MIN_BLOCKS_>
struct Config {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
    static constexpr int MIN_BLOCKS = MIN_BLOCKS_;  // __launch_bounds__' resident blocks per SM
    static constexpr int THREADS_X = BN / TN, THREADS_Y = BM / TM, THREADS = THREADS_X * THREADS_Y;
    static constexpr int PAD = 16 / BK;      // As row stride = BM + PAD: (BM + PAD) % 16 == 16 / BK
    static constexpr int AS_STRIDE = BM + PAD, BS_STRIDE = BN;
    static constexpr int LOADS_A = BM * BK / THREADS, LOADS_B = BK * BN / THREADS;
    static_assert(BM % TM == 0 && BN % TN == 0, "tile must divide by the thread block");
    static_assert((BM * BK) % THREADS == 0 && (BK * BN) % THREADS == 0, "loads must divide evenly");
    static_assert(16 % BK == 0 || BK % 16 == 0, "padding rule");
};

using Small = Config<32, 32, 16, 2, 2, 4>;
using Medium = Config<{{BM}}, {{BN}}, {{BK}}, {{TM}}, {{TN}}, {{MIN_BLOCKS}}>;  // the tuned tile: every n >= 512
using Large = Medium;

// Phase 1: this thread's share of the A and B tiles at k0, from global memory into registers
// (zero outside the matrix). Element e = tid + l * THREADS of the A tile is (row e / BK, k e % BK):
// BK consecutive threads read one row's BK consecutive doubles. Of the B tile: (k e / BN, col e % BN).
template <class K>
__host__ __device__ inline void load_global(int tid, const double* A, const double* B, int n, int bm, int bn, int k0,
                                            double (&ra)[K::LOADS_A], double (&rb)[K::LOADS_B]) {
#pragma unroll
    for (int l = 0; l < K::LOADS_A; l++) {
        int e = tid + l * K::THREADS;
        int r = bm + e / K::BK, c = k0 + e % K::BK;
        ra[l] = (r < n && c < n) ? A[(size_t)r * n + c] : 0.0;
    }
#pragma unroll
    for (int l = 0; l < K::LOADS_B; l++) {
        int e = tid + l * K::THREADS;
        int r = k0 + e / K::BN, c = bn + e % K::BN;
        rb[l] = (r < n && c < n) ? B[(size_t)r * n + c] : 0.0;
    }
}

// Phase 2: the registers of phase 1 into one shared buffer (A transposed: As[k * AS_STRIDE + row]).
template <class K>
__host__ __device__ inline void store_shared(int tid, const double (&ra)[K::LOADS_A], const double (&rb)[K::LOADS_B],
                                             double* As, double* Bs) {
#pragma unroll
    for (int l = 0; l < K::LOADS_A; l++) {
        int e = tid + l * K::THREADS;
        As[(e % K::BK) * K::AS_STRIDE + e / K::BK] = ra[l];
    }
#pragma unroll
    for (int l = 0; l < K::LOADS_B; l++) {
        int e = tid + l * K::THREADS;
        Bs[(e / K::BN) * K::BS_STRIDE + e % K::BN] = rb[l];
    }
}

// Phase 3: the BK steps of one buffer into the thread's TM x TN accumulators. Thread (ty, tx) owns
// rows ty + i * THREADS_Y and columns tx + j * THREADS_X of the tile.
template <class K>
__host__ __device__ inline void compute(int tid, const double* As, const double* Bs, double (&acc)[K::TM][K::TN]) {
    int tx = tid % K::THREADS_X, ty = tid / K::THREADS_X;
#pragma unroll
    for (int kk = 0; kk < K::BK; kk++) {
        double a[K::TM], b[K::TN];
#pragma unroll
        for (int i = 0; i < K::TM; i++) a[i] = As[kk * K::AS_STRIDE + ty + i * K::THREADS_Y];
#pragma unroll
        for (int j = 0; j < K::TN; j++) b[j] = Bs[kk * K::BS_STRIDE + tx + j * K::THREADS_X];
#pragma unroll
        for (int i = 0; i < K::TM; i++)
#pragma unroll
            for (int j = 0; j < K::TN; j++) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
}

// Phase 4: the accumulators into C, inside the matrix only.
template <class K>
__host__ __device__ inline void store_c(int tid, const double (&acc)[K::TM][K::TN], double* C, int n, int bm, int bn) {
    int tx = tid % K::THREADS_X, ty = tid / K::THREADS_X;
#pragma unroll
    for (int i = 0; i < K::TM; i++) {
        int r = bm + ty + i * K::THREADS_Y;
#pragma unroll
        for (int j = 0; j < K::TN; j++) {
            int c = bn + tx + j * K::THREADS_X;
            if (r < n && c < n) C[(size_t)r * n + c] = acc[i][j];
        }
    }
}

// One thread's registers: its accumulators and its share of the next tiles.
template <class K>
struct ThreadState {
    double acc[K::TM][K::TN];
    double ra[K::LOADS_A], rb[K::LOADS_B];
};

// The block's schedule, shared by the kernel and the CPU emulation (tools/emulate_tiled.cu):
// team.each(f) runs f(tid, state) for the block's threads (on the GPU: the calling thread alone),
// team.sync() is the barrier (__syncthreads() on the GPU). Double buffering: step t computes on
// buffer t & 1 while the tiles of step t + 1 go into the other buffer, which no thread reads until
// the barrier that ends step t (its last readers were in step t - 1, before the previous barrier).
#pragma nv_exec_check_disable
template <class K, class Team>
__host__ __device__ inline void block_schedule(Team& team, const double* A, const double* B, double* C, int n,
                                               int bm, int bn, double* As0, double* As1, double* Bs0, double* Bs1) {
    const int steps = (n + K::BK - 1) / K::BK;
    team.each([&](int tid, ThreadState<K>& st) {
#pragma unroll
        for (int i = 0; i < K::TM; i++)
#pragma unroll
            for (int j = 0; j < K::TN; j++) st.acc[i][j] = 0.0;
        load_global<K>(tid, A, B, n, bm, bn, 0, st.ra, st.rb);
        store_shared<K>(tid, st.ra, st.rb, As0, Bs0);
    });
    team.sync();
    for (int t = 0; t < steps; t++) {
        const bool odd = t & 1;
        double *as_cur = odd ? As1 : As0, *bs_cur = odd ? Bs1 : Bs0;
        double *as_next = odd ? As0 : As1, *bs_next = odd ? Bs0 : Bs1;
        const bool more = t + 1 < steps;
        team.each([&](int tid, ThreadState<K>& st) {
            if (more) load_global<K>(tid, A, B, n, bm, bn, (t + 1) * K::BK, st.ra, st.rb);
            compute<K>(tid, as_cur, bs_cur, st.acc);
            if (more) store_shared<K>(tid, st.ra, st.rb, as_next, bs_next);
        });
        team.sync();
    }
    team.each([&](int tid, ThreadState<K>& st) { store_c<K>(tid, st.acc, C, n, bm, bn); });
}

template <class K>
struct DeviceTeam {
    ThreadState<K> st;
    template <class F>
    __device__ void each(F&& f) { f((int)threadIdx.x, st); }
    __device__ void sync() { __syncthreads(); }
};

template <class K>
__global__ void __launch_bounds__(K::THREADS, K::MIN_BLOCKS) dgemm_tiled(const double* __restrict__ A,
                                                                        const double* __restrict__ B,
                                                                        double* __restrict__ C, int n) {
    __shared__ double As[2][K::BK * K::AS_STRIDE];
    __shared__ double Bs[2][K::BK * K::BS_STRIDE];
    DeviceTeam<K> team;
    block_schedule<K>(team, A, B, C, n, blockIdx.y * K::BM, blockIdx.x * K::BN, As[0], As[1], Bs[0], Bs[1]);
}

template <class K>
void launch(const double* A, const double* B, double* C, int n, cudaStream_t s) {
    dim3 grid((n + K::BN - 1) / K::BN, (n + K::BM - 1) / K::BM);
    dgemm_tiled<K><<<grid, K::THREADS, 0, s>>>(A, B, C, n);
}

}  // namespace tiled

void dgemm(const double* A, const double* B, double* C, int n, cudaStream_t s) {
    if (n < 512)
        tiled::launch<tiled::Small>(A, B, C, n, s);
    else
        tiled::launch<tiled::Medium>(A, B, C, n, s);
}
