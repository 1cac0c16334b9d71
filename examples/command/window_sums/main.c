/* The harness side of the window_sums problem (a fixed file: a design may not change it).
 * Usage: ./prog SEED N W. Draws N doubles in [0, 1) from SEED, times window_sums() on them,
 * writes the N - W + 1 sums to out.txt and prints {"time_ms": T} on stdout. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void window_sums(const double *x, long n, long w, double *y);

static uint64_t state;

static double next_unit(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (double)(state >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SEED N W\n", argv[0]);
        return 2;
    }
    state = strtoull(argv[1], NULL, 10) * 2654435761u + 88172645463325252ull;
    long n = atol(argv[2]), w = atol(argv[3]);
    if (n <= 0 || w <= 0 || w > n) {
        fprintf(stderr, "need 0 < W <= N\n");
        return 2;
    }
    double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * (n - w + 1));
    if (!x || !y) return 3;
    for (long i = 0; i < n; i++) x[i] = next_unit();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    window_sums(x, n, w, y);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    FILE *out = fopen("out.txt", "w");
    if (!out) return 4;
    for (long i = 0; i <= n - w; i++) fprintf(out, "%.17g\n", y[i]);
    fclose(out);
    printf("{\"time_ms\": %.6f}\n", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    return 0;
}
