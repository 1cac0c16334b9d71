/* A wrong design: fast, but each window leaves out its last element. */
void window_sums(const double *x, long n, long w, double *y) {
    for (long i = 0; i + w <= n; i++) {
        double s = 0.0;
        for (long j = 0; j < w - 1; j++) s += x[i + j];
        y[i] = s;
    }
}
