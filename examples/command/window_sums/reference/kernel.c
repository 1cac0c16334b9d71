/* The reference: every window summed from scratch, O(N x W). */
void window_sums(const double *x, long n, long w, double *y) {
    for (long i = 0; i + w <= n; i++) {
        double s = 0.0;
        for (long j = 0; j < w; j++) s += x[i + j];
        y[i] = s;
    }
}
