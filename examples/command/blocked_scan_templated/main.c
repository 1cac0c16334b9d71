/* The harness side of the blocked_scan problem (a fixed file: a design may not change it).
 * Usage: ./prog SEED N. Draws N integers in [0, 2^24) from SEED, times prefix_sums() on them,
 * writes the N prefix sums to out.txt and prints {"time_ms": T} on stdout. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void prefix_sums(const long *x, long n, long *y);

static uint64_t state;

static long next_value(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (long)(state >> 40);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SEED N\n", argv[0]);
        return 2;
    }
    state = strtoull(argv[1], NULL, 10) * 2654435761u + 88172645463325252ull;
    long n = atol(argv[2]);
    if (n <= 0) {
        fprintf(stderr, "need N > 0\n");
        return 2;
    }
    long *x = malloc(sizeof(long) * n), *y = malloc(sizeof(long) * n);
    if (!x || !y) return 3;
    for (long i = 0; i < n; i++) x[i] = next_value();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    prefix_sums(x, n, y);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    FILE *out = fopen("out.txt", "w");
    if (!out) return 4;
    for (long i = 0; i < n; i++) fprintf(out, "%ld\n", y[i]);
    fclose(out);
    printf("{\"time_ms\": %.6f}\n", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    return 0;
}
