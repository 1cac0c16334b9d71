#!/usr/bin/env bash
# The device half of the ferry (docs/usage.md, "GPUs that only batch jobs reach"): in one device
# call, serve the carried queue folder with stratagem's own queue worker until it is empty (or
# MAX_S seconds: a started evaluation is finished, then the worker stops), and pack its answers
# into $OUT/fq.tgz for `python benchmarks/ferry_collect.py --queue FQ fq.tgz` on the host.
#
#   FQ=runs/fq bash benchmarks/ferry_serve.sh          (carry ["runs/fq/requests"], plus .whl if any)
#
# Settings (environment): FQ the queue folder (default runs/fq), DEVICE (cuda), SLOTS (the worker's
# --slots; default its own: 2 on a GPU), MAX_S (540: a device command has 600 s), PYTHON (python3),
# STRATAGEM_CACHE_DIR (compile caches, default /tmp/stratagem-cache: kept while the machine is warm).
# The worker needs only the standard library and torch (and triton for Triton designs); wheels
# carried in .whl/ are installed first when there are any. Writes $OUT/worker.log and $OUT/fq.tgz.
set -u
FQ="${FQ:-runs/fq}"; OUT="${OUT:-/tmp/out}"; DEVICE="${DEVICE:-cuda}"; MAX_S="${MAX_S:-540}"; PY="${PYTHON:-python3}"
mkdir -p "$OUT"
t0=$(date +%s)
if [[ ! -d $FQ/requests ]]; then
  echo "ferry_serve: no queue folder $FQ/requests here (carry it: carry [\"$FQ/requests\"])" | tee "$OUT/worker.log"
  exit 2
fi
# a warm machine keeps the last call's folders: only the requests carried now are this call's
rm -rf "$FQ/responses" "$FQ/claimed" "$FQ/progress" "$FQ/consumed" "$FQ/tmp"
shopt -s nullglob
wheels=(.whl/*.whl)
if (( ${#wheels[@]} )); then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" \
    > "$OUT/pip.log" 2>&1 || echo "ferry_serve: installing .whl failed (see pip.log); going on"
fi
export PYTHONPATH="/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-8}"
export STRATAGEM_CACHE_DIR="${STRATAGEM_CACHE_DIR:-/tmp/stratagem-cache}"
queued=("$FQ"/requests/*.json)
{ command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/worker.log" 2>&1
echo "ferry_serve: ${#queued[@]} requests in $FQ on $DEVICE" | tee -a "$OUT/worker.log"
# the worker stops taking requests 60 s before MAX_S; the hard limit is for a request that hangs
timeout -k 15 "$MAX_S" "$PY" -m stratagem.evaluation.queue_worker --queue "$FQ" --device "$DEVICE" --once \
  --max-seconds "$(( MAX_S > 120 ? MAX_S - 60 : MAX_S / 2 ))" ${SLOTS:+--slots "$SLOTS"} >> "$OUT/worker.log" 2>&1
rc=$?
answers=("$FQ"/responses/*.json)
left=("$FQ"/requests/*.json)
echo "ferry_serve: worker rc=$rc after $(( $(date +%s) - t0 )) s: ${#answers[@]} answers, ${#left[@]} requests not served" \
  | tee -a "$OUT/worker.log"
tar czf "$OUT/fq.tgz" -C "$FQ" responses
