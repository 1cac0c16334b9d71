/* CPU stand-in for a design's rob_solve (testing only, dev/README.md): includes the design's
 * solver.cu (SOLVER, a quoted path) for its __host__ __device__ rob_integrate_cell(), and
 * integrates every cell on the host with it. No CUDA runtime call is made. */
#include <cmath>
#include <cstdlib>
#define rob_solve rob_solve_gpu_unused
#define rob_host_alloc rob_host_alloc_gpu_unused
#define rob_host_free rob_host_free_gpu_unused
#include SOLVER
#undef rob_solve
#undef rob_host_alloc
#undef rob_host_free

extern "C" double *rob_host_alloc(size_t count) { return (double *)malloc(count * sizeof(double)); }
extern "C" void rob_host_free(double *p) { free(p); }
extern "C" void rob_solve(int n, double t_end, const double *y0, double *y) {
    for (int j = 0; j < n; j++) {
        double v[3] = {y0[3 * j], y0[3 * j + 1], y0[3 * j + 2]};
        if (rob_integrate_cell(v, t_end) < 0) v[0] = v[1] = v[2] = NAN;
        y[3 * j] = v[0];
        y[3 * j + 1] = v[1];
        y[3 * j + 2] = v[2];
    }
}
