// Prints main.cu's generator on the host (no GPU needed): "KEY SEED N CALL WHICH key" lines and
// "VAL key idx value" lines, so a test can compare them with check.py's numpy generator.
// Build: nvcc -O2 -arch=sm_90 -o gen_values tools/gen_values.cu (from examples/dgemm).
#define DGEMM_HARNESS_NO_MAIN
#include "../main.cu"

void dgemm(const double*, const double*, double*, int, cudaStream_t) {}

int main() {
    using namespace dgemm_harness;
    const uint64_t seeds[] = {1, 12345, 2147483647ULL};
    const int ns[] = {128, 1000, 4096};
    for (uint64_t seed : seeds)
        for (int n : ns)
            for (uint64_t call = 0; call < 3; call++)
                for (uint64_t which = 0; which < 3; which++) {
                    uint64_t key = stream_key(seed, n, call, which);
                    printf("KEY %llu %d %llu %llu %llu\n", (unsigned long long)seed, n, (unsigned long long)call,
                           (unsigned long long)which, (unsigned long long)key);
                    const uint64_t idxs[] = {0, 1, 2, 999, (uint64_t)n * n - 1};
                    for (uint64_t i : idxs)
                        printf("VAL %llu %llu %.17g\n", (unsigned long long)key, (unsigned long long)i, gen_value(key, i));
                }
    return 0;
}
