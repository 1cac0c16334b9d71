// Runs designs/dmma/dgemm.cu's kernel on the CPU: the kernel's own block schedule
// (dmma::block_schedule) and phase functions, for every block, with a host "team" that runs each
// per-thread phase thread by thread and each per-warp phase warp by warp (all 32 lanes at once,
// the mma emulated from the m8n8k4 .f64 fragment layouts), in a given order (forward, then
// reverse: exposes a shared buffer written while another thread of the block still needs it). Every buffer (A, B, C, the shared tiles) sits between guard
// zones of NaN that must stay NaN; built with AddressSanitizer (GUARD=0), any read or write outside
// a buffer is reported. The result must equal, bit for bit, a plain triple loop with one fma per
// term in k order.
//
// Build and run (from examples/dgemm): nvcc -O2 -arch=sm_90 -o emulate tools/emulate_dmma.cu && ./emulate [N...]
// With AddressSanitizer: nvcc -O1 -arch=sm_90 -DGUARD_DOUBLES=0 -Xcompiler -fsanitize=address -c -o emulate.o
// tools/emulate_dmma.cu && g++ -fsanitize=address -o emulate emulate.o -L<cuda>/lib64 -lcudart_static -ldl -lpthread -lrt
// Prints one line per (config, N, order) and "emulation: all OK" or exits 1.
#include "../designs/dmma/dgemm.cu"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

#ifndef GUARD_DOUBLES
#define GUARD_DOUBLES 4096
#endif
const size_t GUARD = GUARD_DOUBLES;

struct Guarded {
    std::vector<double> buf;
    size_t size;
    explicit Guarded(size_t n) : buf(n + 2 * GUARD, NAN), size(n) {}
    double* data() { return buf.data() + GUARD; }
    bool guards_intact() const {
        for (size_t i = 0; i + 1 <= GUARD; i++)
            if (!std::isnan(buf[i]) || !std::isnan(buf[GUARD + size + i])) return false;
        return true;
    }
};

uint64_t rng_state = 0x1234567;
double next_value() {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1.0p-52 - 1.0;
}

template <class K>
struct HostTeam {
    std::vector<dmma::ThreadState<K>> states{(size_t)K::THREADS};
    std::vector<dmma::WarpState<K, 32>> warps{(size_t)K::WARPS};
    std::vector<int> order, warp_order;
    int lanes[32];
    HostTeam() {
        for (int l = 0; l < 32; l++) lanes[l] = l;
    }
    template <class F>
    void each(F&& f) {
        for (int tid : order) f(tid, states[tid]);
    }
    template <class F>
    void each_warp(F&& f) {
        for (int w : warp_order) f(w, lanes, warps[w]);
    }
    void sync() {}
};

template <class K>
bool emulate(int n, bool reverse, const char* name) {
    Guarded A((size_t)n * n), B((size_t)n * n), C((size_t)n * n);
    for (size_t i = 0; i < (size_t)n * n; i++) A.data()[i] = next_value();
    for (size_t i = 0; i < (size_t)n * n; i++) B.data()[i] = next_value();
    // C starts NaN (as the harness leaves it): an entry never written stays NaN.
    const int gx = (n + K::BN - 1) / K::BN, gy = (n + K::BM - 1) / K::BM;
    HostTeam<K> team;
    for (int i = 0; i < K::THREADS; i++) team.order.push_back(reverse ? K::THREADS - 1 - i : i);
    for (int i = 0; i < K::WARPS; i++) team.warp_order.push_back(reverse ? K::WARPS - 1 - i : i);
    bool ok = true;
    for (int by = 0; by < gy; by++) {
        for (int bx = 0; bx < gx; bx++) {
            Guarded As0(K::BM * K::AS_STRIDE), As1(K::BM * K::AS_STRIDE);
            Guarded Bs0(K::BK * K::BS_STRIDE), Bs1(K::BK * K::BS_STRIDE);
            dmma::block_schedule<K>(team, A.data(), B.data(), C.data(), n, by * K::BM, bx * K::BN, As0.data(),
                                    As1.data(), Bs0.data(), Bs1.data());
            ok = ok && As0.guards_intact() && As1.guards_intact() && Bs0.guards_intact() && Bs1.guards_intact();
        }
    }
    ok = ok && A.guards_intact() && B.guards_intact() && C.guards_intact();
    size_t wrong = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int k = 0; k < n; k++) s = std::fma(A.data()[(size_t)i * n + k], B.data()[(size_t)k * n + j], s);
            double got = C.data()[(size_t)i * n + j];
            if (!(got == s)) {
                if (wrong < 3) fprintf(stderr, "  %s n=%d: C[%d][%d] = %.17g, want %.17g\n", name, n, i, j, got, s);
                wrong++;
            }
        }
    printf("%-7s n=%-5d %-8s %s (%zu wrong entries, guards %s)\n", name, n, reverse ? "reverse" : "forward",
           ok && !wrong ? "OK" : "FAIL", wrong, ok ? "intact" : "BROKEN");
    return ok && !wrong;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> sizes;
    for (int i = 1; i < argc; i++) sizes.push_back(atoi(argv[i]));
    if (sizes.empty()) sizes = {1, 7, 33, 128, 200, 1000};
    bool ok = true;
    for (int n : sizes) {
        for (int rev = 0; rev < 2; rev++) {
            ok &= emulate<dmma::Small>(n, rev, "small");
            ok &= emulate<dmma::Medium>(n, rev, "medium");
            ok &= emulate<dmma::Large>(n, rev, "large");
        }
    }
    printf(ok ? "emulation: all OK\n" : "emulation: FAILED\n");
    return ok ? 0 : 1;
}
