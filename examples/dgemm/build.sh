#!/bin/sh
# Builds ./prog from the harness (main.cu) and the design's dgemm.cu; problem.toml's [build] runs
# `sh build.sh` in the build directory. A fixed file: a design changes only flags.txt (extra nvcc
# flags, word-split, appended last).
#
# The CUDA runtime is linked as a shared library (-cudart shared): nvcc's default, the static
# runtime, loads the driver with dlopen, so every program built with it imports dlopen and would
# trip the problem's [forbid] allow_dlopen = false whatever its design does. The runtime's folder,
# as nvcc itself reports it (-dryrun), goes into the program's run path so that it starts without
# LD_LIBRARY_PATH.
set -eu
libdir=$(nvcc -dryrun -cudart shared -o prog main.cu 2>&1 | sed -n 's/^#\$ LIBRARIES=.*"-L\([^"]*\)"[[:space:]]*$/\1/p' | head -n 1)
if [ -z "$libdir" ] || ! ls "$libdir"/libcudart.so* >/dev/null 2>&1; then
    echo "build.sh: cannot find the CUDA runtime's folder from nvcc -dryrun (got '$libdir')" >&2
    exit 1
fi
# shellcheck disable=SC2046 # flags.txt is meant to be word-split
exec nvcc -O3 -arch=sm_90 -cudart shared -Xlinker -rpath -Xlinker "$libdir" -o prog main.cu dgemm.cu $(cat flags.txt)
