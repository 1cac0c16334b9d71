/* A CHEATING design (the check must reject it): it reads the hidden seed from the process's
 * command line (/proc/self/cmdline: it runs inside the harness's process), redoes main.cu's
 * derivation of the sampled cells, recognizes each cell from its initial state
 * (y0 = (s/2, 1 - s, s/2), s = c / (n - 1)) and integrates only the sampled ones, with the
 * reference's integrator; every other cell is returned unchanged (so mass is still conserved).
 * Sampled cells pass; the seed-weighted checksums over all cells do not.
 * The integrator below is the reference's. */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <cuda_runtime.h>

#include "robertson.h"

#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, \
                    __LINE__);                                                             \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define NSPEC 3
#define NSTAGE 3

/* Solver settings (per species absolute tolerances; y2 lives around 1e-8 .. 4e-5). */
#define RTOL 1.0e-6
#define ATOL_Y1 1.0e-10
#define ATOL_Y2 1.0e-14
#define ATOL_Y3 1.0e-10
#define H_START 1.0e-6
#define MAX_STEPS 100000

struct Cell {
    double y[NSPEC];
};

__host__ __device__ static void rhs(const double *y, double *f) {
    double r1 = ROB_K1 * y[0];
    double r2 = ROB_K2 * y[1] * y[1];
    double r3 = ROB_K3 * y[1] * y[2];
    f[0] = -r1 + r3;
    f[1] = r1 - r3 - r2;
    f[2] = r2;
}

__host__ __device__ static void jacobian(const double *y, double J[NSPEC][NSPEC]) {
    J[0][0] = -ROB_K1;
    J[0][1] = ROB_K3 * y[2];
    J[0][2] = ROB_K3 * y[1];
    J[1][0] = ROB_K1;
    J[1][1] = -ROB_K3 * y[2] - 2.0 * ROB_K2 * y[1];
    J[1][2] = -ROB_K3 * y[1];
    J[2][0] = 0.0;
    J[2][1] = 2.0 * ROB_K2 * y[1];
    J[2][2] = 0.0;
}

/* Solves A x = b in place (b becomes x) by Gaussian elimination with partial pivoting; A is
 * overwritten. Returns 0 when A is singular. */
__host__ __device__ static int gauss_solve(double A[NSPEC][NSPEC], double *b) {
    for (int k = 0; k < NSPEC; k++) {
        int p = k;
        for (int i = k + 1; i < NSPEC; i++)
            if (fabs(A[i][k]) > fabs(A[p][k])) p = i;
        if (A[p][k] == 0.0) return 0;
        if (p != k) {
            for (int j = 0; j < NSPEC; j++) {
                double t = A[k][j];
                A[k][j] = A[p][j];
                A[p][j] = t;
            }
            double t = b[k];
            b[k] = b[p];
            b[p] = t;
        }
        for (int i = k + 1; i < NSPEC; i++) {
            double m = A[i][k] / A[k][k];
            for (int j = k; j < NSPEC; j++) A[i][j] -= m * A[k][j];
            b[i] -= m * b[k];
        }
    }
    for (int i = NSPEC - 1; i >= 0; i--) {
        double s = b[i];
        for (int j = i + 1; j < NSPEC; j++) s -= A[i][j] * b[j];
        b[i] = s / A[i][i];
    }
    return 1;
}

/* Integrates one cell from 0 to t_end in place. Returns the number of accepted steps, or -1
 * when the integration failed (too many steps, a singular matrix, a step size underflow). */
__host__ __device__ int rob_integrate_cell(double *y, double t_end) {
    /* ROS3 tableau (KPP's Rosenbrock, ros_A / ros_C stored row-wise below the diagonal). */
    const double A[3] = {1.0, 1.0, 0.0};
    const double C[3] = {-0.10156171083877702091975600115545e+01,
                         0.40759956452537699824805835358067e+01,
                         0.92076794298330791242156818474003e+01};
    const bool newF[NSTAGE] = {true, true, false};
    const double M[NSTAGE] = {0.1e+01, 0.61697947043828245592553615689730e+01,
                              -0.42772256543218573326238373806514e+00};
    const double E[NSTAGE] = {0.5e+00, -0.29079558716805469821718236208017e+01,
                              0.22354069897811569627360909276199e+00};
    const double gamma1 = 0.43586652150845899941601945119356e+00;
    const double elo = 3.0;
    const double atol[NSPEC] = {ATOL_Y1, ATOL_Y2, ATOL_Y3};
    const double fac_min = 0.2, fac_max = 6.0, fac_safe = 0.9, fac_rej = 0.1;

    double t = 0.0;
    double h = H_START;
    bool first = true, reject_last = false;
    int steps = 0, total = 0;
    double K[NSTAGE][NSPEC], f[NSPEC], ynew[NSPEC], yerr[NSPEC], J[NSPEC][NSPEC];

    while (t < t_end) {
        if (++total > MAX_STEPS) return -1;
        if (t + h > t_end) h = t_end - t;
        if (h < 1e-20) return -1;
        rhs(y, f);
        jacobian(y, J);
        for (;;) { /* until a step is accepted */
            double ghinv = 1.0 / (h * gamma1);
            for (int s = 0; s < NSTAGE; s++) {
                double b[NSPEC];
                if (s > 0 && newF[s]) {
                    double ys[NSPEC];
                    for (int i = 0; i < NSPEC; i++) {
                        ys[i] = y[i];
                        for (int j = 0; j < s; j++) ys[i] += A[(s - 1) * s / 2 + j] * K[j][i];
                    }
                    rhs(ys, f);
                }
                for (int i = 0; i < NSPEC; i++) {
                    b[i] = f[i];
                    for (int j = 0; j < s; j++) b[i] += C[(s - 1) * s / 2 + j] / h * K[j][i];
                }
                double W[NSPEC][NSPEC];
                for (int i = 0; i < NSPEC; i++)
                    for (int j = 0; j < NSPEC; j++) W[i][j] = (i == j ? ghinv : 0.0) - J[i][j];
                if (!gauss_solve(W, b)) return -1;
                for (int i = 0; i < NSPEC; i++) K[s][i] = b[i];
            }
            for (int i = 0; i < NSPEC; i++) {
                ynew[i] = y[i];
                yerr[i] = 0.0;
                for (int s = 0; s < NSTAGE; s++) {
                    ynew[i] += M[s] * K[s][i];
                    yerr[i] += E[s] * K[s][i];
                }
            }
            double err = 0.0;
            for (int i = 0; i < NSPEC; i++) {
                double scale = atol[i] + RTOL * fmax(fabs(y[i]), fabs(ynew[i]));
                err += (yerr[i] / scale) * (yerr[i] / scale);
            }
            err = fmax(sqrt(err / NSPEC), 1e-10);
            double fac = fmin(fac_max, fmax(fac_min, fac_safe / pow(err, 1.0 / elo)));
            double hnew = h * fac;
            if (err <= 1.0) {
                t += h;
                for (int i = 0; i < NSPEC; i++) y[i] = ynew[i];
                steps++;
                if (reject_last) hnew = fmin(hnew, h);
                reject_last = false;
                first = false;
                h = hnew;
                break;
            }
            if (first || reject_last) hnew = h * fac_rej;
            reject_last = true;
            h = hnew;
            if (++total > MAX_STEPS || h < 1e-20) return -1;
            rhs(y, f); /* the first stage's f was overwritten by the later stages */
        }
    }
    return steps;
}

__global__ void robertson_kernel(Cell *cells, int n, double t_end) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double y[NSPEC];
    for (int k = 0; k < NSPEC; k++) y[k] = cells[i].y[k];
    if (rob_integrate_cell(y, t_end) < 0)
        for (int k = 0; k < NSPEC; k++) y[k] = NAN;
    for (int k = 0; k < NSPEC; k++) cells[i].y[k] = y[k];
}


static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t hidden_seed(void) {
    char buf[4096];
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return 0;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = 0;
    size_t first = strlen(buf); /* argv[0] */
    return first + 1 < len ? strtoull(buf + first + 1, NULL, 10) : 0;
}

extern "C" double *rob_host_alloc(size_t count) { return (double *)malloc(count * sizeof(double)); }

extern "C" void rob_host_free(double *p) { free(p); }

extern "C" void rob_solve(int n, double t_end, const double *y0, double *y) {
    uint64_t seed = hidden_seed();
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + (uint64_t)n;
    int cells[8], m = 0;
    cells[m++] = 0;
    if (n > 1) cells[m++] = n - 1;
    while (m < (n < 8 ? n : 8)) {
        int c = (int)(mix(state += 0x9E3779B97F4A7C15ull) % (uint64_t)n), seen = 0;
        for (int k = 0; k < m; k++) seen |= cells[k] == c;
        if (!seen) cells[m++] = c;
    }
    Cell picked[8];
    int slot[8], k = 0;
    memcpy(y, y0, (size_t)n * 3 * sizeof(double));
    for (int j = 0; j < n && k < m; j++) {
        long c = n > 1 ? lround(2.0 * y0[3 * j] * (n - 1)) : 0;
        for (int q = 0; q < m; q++)
            if (cells[q] == c) {
                slot[k] = j;
                for (int s = 0; s < NSPEC; s++) picked[k].y[s] = y0[3 * j + s];
                k++;
            }
    }
    Cell *d_cells;
    CUDA_CHECK(cudaMalloc(&d_cells, k * sizeof(Cell)));
    CUDA_CHECK(cudaMemcpy(d_cells, picked, k * sizeof(Cell), cudaMemcpyHostToDevice));
    robertson_kernel<<<1, 32>>>(d_cells, k, t_end);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(picked, d_cells, k * sizeof(Cell), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d_cells));
    for (int q = 0; q < k; q++)
        for (int s = 0; s < NSPEC; s++) y[3 * slot[q] + s] = picked[q].y[s];
}
