/* A design that reaches the math library at run time, hiding it from a scan of its source: the
 * loader's function name and the library's file name are pasted together by the preprocessor and
 * the compiler. Only the built binary shows them (the loader's import, the library's name in its
 * strings): the `build` stage rejects it. */
#define CAT(a, b) a##b

void *CAT(dl, open)(const char *file, int mode);
void *CAT(dl, sym)(void *handle, const char *name);

void window_sums(const double *x, long n, long w, double *y) {
    void *libm = CAT(dl, open)("lib" "m.so.6", 2);
    double (*fma_)(double, double, double) = libm ? (double (*)(double, double, double))CAT(dl, sym)(libm, "fma") : 0;
    double s = 0.0;
    for (long j = 0; j < w; j++) s += x[j];
    y[0] = s;
    for (long i = 1; i + w <= n; i++) {
        s = (fma_ ? fma_(1.0, x[i + w - 1], s) : s + x[i + w - 1]) - x[i - 1];
        y[i] = s;
    }
}
