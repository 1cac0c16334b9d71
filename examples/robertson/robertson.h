/* robertson.h: the interface between the fixed harness (main.cu) and a design's solver.cu.
 * A fixed file: a design may not change it.
 *
 * The Robertson (1966) stiff chemical kinetics system, three species, integrated independently
 * in every cell from t = 0 to t = ROB_T_END:
 *   dy1/dt = -k1 y1 + k3 y2 y3
 *   dy2/dt =  k1 y1 - k3 y2 y3 - k2 y2^2
 *   dy3/dt =  k2 y2^2
 * State layout in the host buffers: array of structs, cell j at y[3j], y[3j+1], y[3j+2]. */
#pragma once
#include <stddef.h>

#define ROB_K1 0.04
#define ROB_K2 3.0e7
#define ROB_K3 1.0e4
#define ROB_T_END 100.0

#ifdef __cplusplus
extern "C" {
#endif

/* Host buffer of `count` doubles for the harness's initial and final states (allocated once per
 * size before the warm-up call, outside the timed region; freed by rob_host_free). A design
 * chooses what memory it is: plain malloc, pinned (cudaMallocHost), ... */
double *rob_host_alloc(size_t count);
void rob_host_free(double *p);

/* The timed call. Integrates the n cells whose initial states are y0[3j..3j+2] from t = 0 to
 * t_end and writes the final states to y[3j..3j+2] (host buffers from rob_host_alloc). Every
 * cell is integrated on its own: its result may depend on its own initial state only. The
 * results must be in y when the call returns (the harness also synchronizes the device before
 * it stops the clock). A design may keep device buffers, streams and the like between calls
 * (a CFD code calls its chemistry every time step on the same mesh), never results. */
void rob_solve(int n, double t_end, const double *y0, double *y);

#ifdef __cplusplus
}
#endif
