#!/usr/bin/env bash
# One device call for the showcase problems (issues 26 and 27) and a KernelBench check of the
# harness: run on the GPU machine from the repository root with the wheels of
# benchmarks/gpu_session.sh in .whl/ (plus openai, jiter, sniffio for the agents' imports) and
# KernelBench's level folders in .kb/ (carry [".whl", ".kb"]). Writes logs and JSON under $OUT.
# Each step has its own limit; a step that runs out leaves the others to run.
set -u
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MAX_JOBS=8
# STEPS picks the steps to run (default all): kb_relu compile rob_search dgemm_search rob_tune dgemm_tune
STEPS="${STEPS:-kb_relu compile rob_search dgemm_search rob_tune dgemm_tune}"
step() { local t=$1 name=$2; shift 2; case " $STEPS " in *" $name "*) ;; *) return 0;; esac; echo "=== $name"; timeout "$t" "$@" > "$OUT/$name.log" 2>&1; echo "rc=$? $(tail -c 3000 "$OUT/$name.log" | grep -v Warning | tail -25)"; }
# the harness at KernelBench's size after the baselines moved into the PyTorch domain
step 100 kb_relu python3 benchmarks/kernelbench_scale.py --kernelbench .kb --problems level1/19_ReLU --repeats 1 --baselines eager,compile --out "$OUT/kb_relu.json"
# a load_inline CUDA candidate cold, unchanged and changed, with the shared build cache (issue 28)
step "${COMPILE_S:-200}" compile python3 benchmarks/compile_throughput.py --device cuda --json
# the whole path (evaluate, rank, report) with a scripted model
step "${ROB_SEARCH_S:-100}" rob_search python3 benchmarks/showcase.py --example examples/robertson --designs "" --search designs/wrong,designs/tuned --runs-dir "$OUT/runs" --out "$OUT/rob_search.json"
step "${DGEMM_SEARCH_S:-130}" dgemm_search python3 benchmarks/showcase.py --example examples/dgemm --designs "" --search designs/float32,designs/dmma --runs-dir "$OUT/runs" --out "$OUT/dgemm_search.json"
# tuning, on copies with one run per block and one correctness trial (6 pairs kept: stability needs them)
for ex in robertson dgemm; do
  rm -rf "/tmp/$ex"; cp -r "examples/$ex" "/tmp/$ex"
  sed -i 's/^runs = 2/runs = 1/; s/^trials = 2/trials = 1/' "/tmp/$ex/problem.toml"
done
step "${ROB_TUNE_S:-150}" rob_tune python3 benchmarks/showcase.py --example /tmp/robertson --designs "" --tune designs/tuned_template --tune-iterations "${ROB_TUNE_N:-5}" --runs-dir "$OUT/runs" --out "$OUT/rob_tune.json"
step "${DGEMM_TUNE_S:-170}" dgemm_tune python3 benchmarks/showcase.py --example /tmp/dgemm --designs "" --tune designs/tiled_template --tune-iterations "${DGEMM_TUNE_N:-5}" --runs-dir "$OUT/runs" --out "$OUT/dgemm_tune.json"
# one archive: the device tool brings back at most 8 files
(cd "$OUT" && tar czf session.tgz --exclude session.tgz . 2>/dev/null && find . -mindepth 1 ! -name session.tgz -delete)
ls -la "$OUT"
