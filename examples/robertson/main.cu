/* main.cu: the fixed harness of the robertson problem (a design may not change it).
 *
 * Usage: ./prog SEED [MAX_N]
 * (MAX_N, for testing the harness on the CPU only: sizes above it are skipped. The problem's run
 * command never passes it, and check.py rejects an output that lacks a size.)
 * For every size n in 10, 100, ..., 10^6 cells:
 *   - cell c (0 <= c < n) starts at s = c / (n - 1) (s = 0 when n = 1) on the segment from
 *     (y1, y2, y3) = (0, 1, 0) to (0.5, 0, 0.5): y0 = (s / 2, 1 - s, s / 2);
 *   - the harness calls rob_solve() 1 + REPS(n) times: a warm-up call, then REPS(n) timed calls.
 *     Before every call the cells are rotated by a seed-derived offset (array slot j holds cell
 *     (j + offset) mod n) and the output buffer is filled with NaN, so no call can reuse an
 *     earlier call's results;
 *   - a call's time is the host wall time from just before rob_solve() (device synchronized) to
 *     just after it returned and the device was synchronized again: allocation, transfers,
 *     kernels and synchronization included;
 *   - after every call (warm-up included) the harness computes, over ALL n cells, the
 *     seed-weighted checksums sum_c w(c) y_s(c) of each species, the largest mass defect
 *     |y1 + y2 + y3 - 1| and the number of non-finite values;
 *   - after the last call it records the final states of the SAMPLED cells: cells 0 and n - 1
 *     and then distinct cells drawn from the seed until min(8, n) are chosen.
 * Writes out.json (what check.py reads) and prints one JSON line on stdout:
 *   {"time_ms": {"10": median_ms, "100": ..., "1000000": ...}}
 * then ends the process with _exit(0), so that no code of the design's (a static destructor, an
 * atexit handler) runs after that line.
 *
 * Pseudo-random numbers (the same derivation is in check.py): splitmix64.
 *   mix(z): z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
 *           return z ^ (z >> 31)                                          (all mod 2^64)
 *   the stream of size n: state = SEED * 0x9E3779B97F4A7C15 + n; next() = mix(state += 0x9E3779B97F4A7C15)
 *   sampled cells: 0, n - 1, then next() % n, skipping repeats, until min(8, n) cells;
 *   then the rotation offsets of the 1 + REPS(n) calls: next() % n each;
 *   weights: w(c) = 0.5 + (mix(SEED * 0xD1B54A32D192ED03 + c) >> 11) * 2^-53, in [0.5, 1.5). */
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>
#include <unistd.h>

#include "robertson.h"

static const int SIZES[] = {10, 100, 1000, 10000, 100000, 1000000};
static const int NSIZES = sizeof(SIZES) / sizeof(SIZES[0]);
static const int NSAMPLES = 8;

static int reps_for(int n) { return n <= 10000 ? 10 : n <= 100000 ? 7 : 5; }

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct Stream {
    uint64_t state;
    uint64_t next() { return mix(state += 0x9E3779B97F4A7C15ull); }
};

static double weight(uint64_t seed, int c) {
    return 0.5 + (double)(mix(seed * 0xD1B54A32D192ED03ull + (uint64_t)c) >> 11) * 0x1.0p-53;
}

static void die_cuda(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        fprintf(stderr, "harness: CUDA error after %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

struct SizeResult {
    int n;
    int reps;
    double median_ms;
    std::vector<double> times_ms;
    std::vector<int> cells;
    std::vector<double> sampled;          /* 3 per sampled cell, from the last call */
    std::vector<double> checksums;        /* 3 per call (warm-up first) */
    std::vector<double> mass_defect;      /* per call */
    std::vector<long> nonfinite;          /* per call */
    double weight_sum;
};

static SizeResult run_size(uint64_t seed, int n) {
    SizeResult r;
    r.n = n;
    r.reps = reps_for(n);
    Stream rng{seed * 0x9E3779B97F4A7C15ull + (uint64_t)n};
    r.cells.push_back(0);
    if (n > 1) r.cells.push_back(n - 1);
    while ((int)r.cells.size() < std::min(NSAMPLES, n)) {
        int c = (int)(rng.next() % (uint64_t)n);
        if (std::find(r.cells.begin(), r.cells.end(), c) == r.cells.end()) r.cells.push_back(c);
    }
    std::vector<double> w(n);
    r.weight_sum = 0.0;
    for (int c = 0; c < n; c++) r.weight_sum += (w[c] = weight(seed, c));

    double *y0 = rob_host_alloc((size_t)3 * n);
    double *y = rob_host_alloc((size_t)3 * n);
    if (!y0 || !y) {
        fprintf(stderr, "harness: rob_host_alloc failed for n = %d\n", n);
        exit(1);
    }
    die_cuda("rob_host_alloc");
    int calls = 1 + r.reps;
    int off = 0;
    for (int k = 0; k < calls; k++) {
        off = (int)(rng.next() % (uint64_t)n);
        for (int j = 0; j < n; j++) {
            int c = (j + off) % n;
            double s = n > 1 ? (double)c / (double)(n - 1) : 0.0;
            y0[3 * j] = 0.5 * s;
            y0[3 * j + 1] = 1.0 - s;
            y0[3 * j + 2] = 0.5 * s;
            y[3 * j] = y[3 * j + 1] = y[3 * j + 2] = NAN;
        }
        cudaDeviceSynchronize();
        die_cuda("the previous call");
        auto t0 = std::chrono::steady_clock::now();
        rob_solve(n, ROB_T_END, y0, y);
        cudaDeviceSynchronize();
        auto t1 = std::chrono::steady_clock::now();
        die_cuda("rob_solve");
        double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
        if (k > 0) r.times_ms.push_back(ms);
        double cs[3] = {0.0, 0.0, 0.0}, defect = 0.0;
        long bad = 0;
        for (int j = 0; j < n; j++) {
            int c = (j + off) % n;
            const double *v = y + 3 * j;
            if (!std::isfinite(v[0]) || !std::isfinite(v[1]) || !std::isfinite(v[2])) {
                bad++;
                continue;
            }
            for (int s = 0; s < 3; s++) cs[s] += w[c] * v[s];
            defect = std::max(defect, std::fabs(v[0] + v[1] + v[2] - 1.0));
        }
        for (int s = 0; s < 3; s++) r.checksums.push_back(cs[s]);
        r.mass_defect.push_back(defect);
        r.nonfinite.push_back(bad);
    }
    for (int c : r.cells) {
        int j = ((c - off) % n + n) % n;
        for (int s = 0; s < 3; s++) r.sampled.push_back(y[3 * j + s]);
    }
    rob_host_free(y0);
    rob_host_free(y);
    die_cuda("rob_host_free");
    std::vector<double> t = r.times_ms;
    std::sort(t.begin(), t.end());
    r.median_ms = t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
    return r;
}

/* JSON has no NaN/Infinity: a non-finite number is written as null. */
static void put_num(FILE *f, double x) {
    if (std::isfinite(x)) fprintf(f, "%.17g", x);
    else fputs("null", f);
}

static void put_list(FILE *f, const std::vector<double> &v) {
    fputc('[', f);
    for (size_t i = 0; i < v.size(); i++) {
        if (i) fputs(", ", f);
        put_num(f, v[i]);
    }
    fputc(']', f);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s SEED [MAX_N]\n", argv[0]);
        return 2;
    }
    remove("out.json"); /* a run that does not get to write it leaves none */
    uint64_t seed = strtoull(argv[1], NULL, 10);
    long max_n = argc == 3 ? atol(argv[2]) : 1000000000L;
    cudaFree(0); /* the CUDA context, created outside every timed call */
    die_cuda("creating the CUDA context");
    std::vector<SizeResult> results;
    for (int i = 0; i < NSIZES; i++)
        if (SIZES[i] <= max_n) results.push_back(run_size(seed, SIZES[i]));

    FILE *f = fopen("out.json", "w");
    if (!f) {
        perror("out.json");
        return 4;
    }
    fprintf(f, "{\"seed\": %llu, \"t_end\": %.17g, \"sizes\": {", (unsigned long long)seed, (double)ROB_T_END);
    for (size_t i = 0; i < results.size(); i++) {
        const SizeResult &r = results[i];
        fprintf(f, "%s\n \"%d\": {\"n\": %d, \"reps\": %d, \"weight_sum\": %.17g, \"cells\": [", i ? "," : "", r.n,
                r.n, r.reps, r.weight_sum);
        for (size_t k = 0; k < r.cells.size(); k++) fprintf(f, "%s%d", k ? ", " : "", r.cells[k]);
        fprintf(f, "],\n  \"y\": [");
        for (size_t k = 0; k < r.cells.size(); k++) {
            fprintf(f, "%s[", k ? ", " : "");
            for (int s = 0; s < 3; s++) {
                if (s) fputs(", ", f);
                put_num(f, r.sampled[3 * k + s]);
            }
            fputc(']', f);
        }
        fprintf(f, "],\n  \"checksums\": [");
        for (size_t k = 0; k < r.checksums.size() / 3; k++) {
            fprintf(f, "%s[", k ? ", " : "");
            for (int s = 0; s < 3; s++) {
                if (s) fputs(", ", f);
                put_num(f, r.checksums[3 * k + s]);
            }
            fputc(']', f);
        }
        fprintf(f, "],\n  \"mass_defect\": ");
        put_list(f, r.mass_defect);
        fprintf(f, ",\n  \"nonfinite\": [");
        for (size_t k = 0; k < r.nonfinite.size(); k++) fprintf(f, "%s%ld", k ? ", " : "", r.nonfinite[k]);
        fprintf(f, "],\n  \"times_ms\": ");
        put_list(f, r.times_ms);
        fputc('}', f);
    }
    fprintf(f, "\n}}\n");
    if (fclose(f) != 0) {
        perror("out.json");
        return 4;
    }
    printf("{\"time_ms\": {");
    for (size_t i = 0; i < results.size(); i++)
        printf("%s\"%d\": %.6f", i ? ", " : "", results[i].n, results[i].median_ms);
    printf("}}\n");
    fflush(stdout);
    fflush(stderr);
    /* _exit: no static destructor or atexit handler (a design's) runs after the time line, so the
     * harness's line is the last one on stdout. */
    _exit(0);
}
