/* Host-only test driver: runs a design's per-cell integrator on the CPU (no CUDA runtime call,
 * so it runs on a machine without a GPU). Build from the problem directory:
 *   nvcc -O2 -arch=sm_90 -I. -o /tmp/rob_host dev/host_driver.cu -DSOLVER='"reference/solver.cu"'
 * Usage: rob_host T_END s1 s2 ...   (s in [0, 1]: y0 = (s/2, 1 - s, s/2))
 * Prints one line per s: s steps y1 y2 y3 (%.17g). */
#include <cstdio>
#include <cstdlib>
#include SOLVER

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s T_END s...\n", argv[0]);
        return 2;
    }
    double t_end = atof(argv[1]);
    for (int a = 2; a < argc; a++) {
        double s = atof(argv[a]);
        double y[3] = {0.5 * s, 1.0 - s, 0.5 * s};
        int steps = rob_integrate_cell(y, t_end);
        printf("%.17g %d %.17g %.17g %.17g\n", s, steps, y[0], y[1], y[2]);
    }
    return 0;
}
