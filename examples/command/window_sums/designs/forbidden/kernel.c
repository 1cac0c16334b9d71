/* A design that reaches for libm, which this problem forbids: it links -lm (flags.txt). */
#include <math.h>

void window_sums(const double *x, long n, long w, double *y) {
    double s = 0.0;
    for (long j = 0; j < w; j++) s += x[j];
    y[0] = s;
    for (long i = 1; i + w <= n; i++) {
        s = fma(1.0, x[i + w - 1], s) - x[i - 1];
        y[i] = s;
    }
}
