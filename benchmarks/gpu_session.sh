#!/usr/bin/env bash
# Everything a session runs on the lent GPU machine, in one call (device README: few, full
# calls). The machine has torch, triton, typer and rich but no pydantic: carry the wheels in
# .whl/ (see docs below) and pass carry [".whl"]. Writes logs under $OUT.
#
#   .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl pydantic==2.14.4 pydantic_core==2.50.5 \
#     annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0
# For the agents' code (scripted searches: benchmarks/showcase.py), the tuner and the command
# examples' checks, add --platform any and (with their dependencies, then remove numpy, which
# the machine has): pydantic-ai-slim==2.68.0 openai==3.57.0 jiter==0.19.0 sniffio==1.3.1
# optuna==5.0.0 scipy==1.17.1 (about 50 MB; carry stays under 64 MiB with .kb's level folders).
#
# For the Ray executor on the device (issue 29's H200 benchmark): Ray's wheel (79 MB) is over the
# 64 MiB carry; `python benchmarks/ray_wheel.py` writes .whl-ray/ (Ray without its Java jars,
# 47 MB, and its dependencies: 48 MiB), which fits beside the five pydantic wheels above and
# .head.tgz (carry [".whl-ray", ".whl-min", ".head.tgz"], with .whl-min holding only those five);
# install both folders with pip --target and run benchmarks/executor_throughput.py --device cuda.
# `ray` runs that benchmark: the GPU (local and Ray, one slot) then the CPU (1, 2, 4 slots), its
# arguments passed to both (e.g. --evaluations 8).
# Usage (on the device): bash benchmarks/gpu_session.sh tests|recipes|modes|integrity|harness|noise|bench|ray [--only a,b]
# STEP_S (default 560) is each step's timeout: lower it to run two steps in one command.
# `integrity` runs benchmarks/integrity_cost.py --device cuda --repeats 3 with its arguments.
# `modes` runs recipes_run.py under the fixed and the calibrated rule at once (issue 10; about
# 110 s per example each with --recipes inference_mode,channels_last,autocast-bf16,autocast-fp16,compile).
# `noise` runs benchmarks/timing_noise.py (paired vs unpaired under load) with its arguments.
# `tests` takes pytest arguments instead (default tests/gpu). The whole gpu suite took 549 s of
# the 560 s limit on 2026-11-30 and has grown since: run it in two calls,
#   tests tests/gpu/test_gpu_harness.py
#   tests tests/gpu/test_gpu_integrity.py tests/gpu/test_gpu_search.py
# (a recipes run over all six examples takes longer than one command: split it with --only,
# e.g. 01_elementwise,02_reduction,03_softmax then 04_matmul,05_conv,06_fused_block)
# Each part fits one device command (10 minutes); call them back to back while the machine is
# warm (compile caches in .sc/ are kept between calls on a warm machine).
set -u
what="${1:?usage: gpu_session.sh tests|recipes|modes|integrity|harness|noise}"
T="${STEP_S:-560}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
# every wheel folder carried: .whl (all), or .whl-min (the five pydantic wheels) with .whl-ray
# (each file once: a wheel in two folders would be two requirements to pip)
declare -A seen; wheels=()
for w in .whl/*.whl .whl-min/*.whl .whl-ray/*.whl; do
  [[ -f $w && -z ${seen[$(basename "$w")]:-} ]] && { seen[$(basename "$w")]=1; wheels+=("$w"); }
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}"
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 STRATAGEM_CACHE_DIR=$PWD/.sc MAX_JOBS=8
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [[ $what == tests ]]; then
  targets=("${@:2}")
  [[ ${#targets[@]} -eq 0 ]] && targets=(tests/gpu)
  timeout $T python3 -m pytest -m gpu "${targets[@]}" -p no:cacheprovider -q -rA -o addopts="" 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -40
fi
if [[ $what == recipes ]]; then
  timeout $T python3 benchmarks/recipes_run.py --device cuda --runs-dir "$OUT/runs" "${@:2}" 2>&1 \
    | tee "$OUT/recipes_run.log" | tail -20
fi
if [[ $what == modes ]]; then  # issue 10: recipes under both correctness rules at once (one GPU, shared lock)
  for m in fixed calibrated; do
    timeout $T python3 benchmarks/recipes_run.py --device cuda --correctness $m --runs-dir "$OUT/runs-$m" "${@:2}" \
      > "$OUT/recipes_$m.log" 2>&1 &
  done
  wait
  tail -n 30 "$OUT/recipes_fixed.log" "$OUT/recipes_calibrated.log"
fi
if [[ $what == noise ]]; then
  timeout $T python3 benchmarks/timing_noise.py --device cuda --out "$OUT/timing_noise.json" "${@:2}" 2>&1 \
    | tee "$OUT/timing_noise.log" | tail -40
fi
if [[ $what == integrity ]]; then
  timeout $T python3 benchmarks/integrity_cost.py --device cuda --repeats 3 "${@:2}" 2>&1 \
    | tee "$OUT/integrity_cost.log" | tail -30
fi
if [[ $what == bench ]]; then  # issue 28: the suite's standing numbers (recipes over KernelBench's levels)
  # SUITE_DIR (default /tmp/suite, kept on a warm machine between calls) continues with --resume when it
  # exists; the limit stops it with SIGINT (the running problems marked interrupted, resumable).
  S="${SUITE_DIR:-/tmp/suite}"
  # SUITE_SRC: the checkout's folder (default .kb, KernelBench's level folders; .pike for PIKE's
  # level3-pike and level5, carried the same way)
  if [[ -f $S/suite.json ]]; then args=(--resume "$S"); else args=("${SUITE_SRC:-.kb}" --run-dir "$S" "${@:2}"); fi
  t0=$(date +%s)
  timeout -s INT -k 60 $T python3 -m stratagem bench "${args[@]}" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? wall_s=$(( $(date +%s) - t0 ))"; grep -v Warning "$OUT/bench.log" | tail -40
  python3 -c "import sys; from pathlib import Path; from rich.console import Console; from stratagem.cli.bench import print_results; print_results(Console(width=200), sys.argv[2] == 'json', Path(sys.argv[1]))" "$S" json > "$OUT/bench.json"
  python3 -c "import sys; from pathlib import Path; from rich.console import Console; from stratagem.cli.bench import print_results; print_results(Console(width=200), False, Path(sys.argv[1]))" "$S" x | tail -30
  tar czf "$OUT/suite.tgz" -C "$(dirname "$S")" "$(basename "$S")"
fi
if [[ $what == harness ]]; then
  timeout $T python3 benchmarks/harness.py --repeats 3 --out "$OUT/harness.json" 2>&1 | tail -60
fi
if [[ $what == ray ]]; then  # issue 29: evaluations per minute, local against Ray, on the H200 and its cores
  export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
  timeout $T python3 benchmarks/executor_throughput.py --device cuda --slots 1 "${@:2}" 2>&1 \
    | grep -v Warning | tee "$OUT/ray_cuda.log" | tail -8
  timeout $T python3 benchmarks/executor_throughput.py --device cpu --slots 1,2,4 "${@:2}" 2>&1 \
    | grep -v Warning | tee "$OUT/ray_cpu.log" | tail -12
fi
