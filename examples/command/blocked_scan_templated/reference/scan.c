/* The reference, a template (docs/tune.md): built at its defaults (BLOCK = 4, GROUP = 2, a 64-bit
 * accumulator: per element 1036 steps), tuned by --policy tune. BLOCK and GROUP set the cost, per
 * element 8192 / (BLOCK x GROUP) + BLOCK + 4 x GROUP steps of a dependent chain (least at
 * BLOCK = 32, GROUP = 8); ACC is the accumulator, and a 32-bit one overflows (a wrong output).
 * A group is staged in a scratch buffer of 16384 longs, which the constraint keeps it within. */
// stratagem: param BLOCK = pow2(1, 4096, default=4)
// stratagem: param GROUP = pow2(1, 64, default=2)
// stratagem: param ACC = choice("unsigned long long", "unsigned int", default="unsigned long long")
// stratagem: require BLOCK * GROUP <= 16384
#define BLOCK {{BLOCK}}
#define GROUP {{GROUP}}
typedef {{ACC}} acc_t;

static volatile unsigned long long sink;
static long scratch[16384];

static unsigned long long spin(unsigned long long s, long k) {
    for (long i = 0; i < k; i++) s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return s;
}

void prefix_sums(const long *x, long n, long *y) {
    unsigned long long s = 1;
    acc_t acc = 0;
    for (long g0 = 0; g0 < n; g0 += (long)BLOCK * GROUP) {
        long gn = n - g0 < (long)BLOCK * GROUP ? n - g0 : (long)BLOCK * GROUP;
        s = spin(s, 8192);                                       /* the group's setup */
        for (long i = 0; i < gn; i++) scratch[i] = x[g0 + i];
        for (long b0 = 0; b0 < gn; b0 += BLOCK) {
            long end = b0 + BLOCK < gn ? b0 + BLOCK : gn;
            s = spin(s, (long)BLOCK * BLOCK + 4L * GROUP * BLOCK);   /* the block's cost */
            for (long i = b0; i < end; i++) {
                acc += (acc_t)scratch[i];
                y[g0 + i] = (long)acc;
            }
        }
    }
    sink = s;
}
