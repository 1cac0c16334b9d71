"""Owns the judge: the correctness verdict, decided in a process where candidate code never ran.

The worker runs the candidate, so anything it reports can be forged by code that reaches its
frames (it can write a response in which every stage passed and exit). The judge is a
separate sandboxed process, started beside the worker from the parent's copy of the request.
It loads only the problem and, while the worker runs, draws its sample in secret and runs the
reference on those calls' inputs (made from the request's seeds). When the worker has ended
(its strays killed) and said every stage passed, the parent hands the judge the worker's
response and a fresh nonce (the `go` file); the judge then reads the outputs the worker
recorded (record.py) and compares them by the same rule and code as the worker:

- every correctness trial must have a record; one of them, drawn at random by the judge, is
  compared (the trials come from one distribution; the worker compared them all);
- the randomised-parameters trial (`params-SEED`), unless the reference has no floating state
  (checked here) or the worker says the candidate's state does not map onto the reference's
  (a claim the judge cannot check: the answer notes it);
- the off-distribution trial (`offdist-SEED`), unless the problem opts out or the reference is
  not finite there (checked here);
- every timed call drawn for checking (`timed-ATTEMPT-CALL`): the worker only records these,
  the judge alone compares them.

A missing or unreadable record fails its stage as tampering: the worker claimed a check it
did not make. The answer carries the nonce, so an answer provoked by a `go` file the
candidate wrote itself is refused by the parent. What stays in the candidate's process: the
integrity and shapes stages' comparisons and the timing samples.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from stratagem.domains.pytorch.worker import params, record, runtime
from stratagem.domains.pytorch.worker.runtime import StageFailure
from stratagem.domains.pytorch.worker.stages import Emit, Worker, prepare_device

MAX_RECORD_BYTES = 1 << 32
"""The largest recorded output the judge reads (4 GiB)."""
GO_POLL_S = 0.02


class Finding(Exception):
    def __init__(self, stage: str, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.stage, self.kind, self.reason = stage, kind, reason


@dataclass
class Planned:
    """One sampled call: its record's name, its inputs and the reference's output (on the CPU
    while the worker runs)."""

    key: str
    what: str
    inputs: list[Any]
    ref_out: Any
    model: torch.nn.Module | None = None
    """The randomised reference (the params trial); None: the problem's own."""


def run_judge(request: Mapping[str, Any], go_path: Path, record_dir: Path, workdir: Path,
              emit: Emit) -> dict[str, Any]:
    """Prepare, wait for `go_path`, judge. Returns {nonce, ok, failures, checked, notes}."""
    request = prepare_device(request)
    w = Worker({**request, "candidate": None, "judge": False}, workdir, emit)
    w.stage_load()
    notes: list[str] = []
    try:
        with w.hold("shared"), torch.no_grad():
            planned, visible = _prepare(w, notes)
    except StageFailure as e:  # the reference itself failed here: not the candidate's doing
        go = _await_go(go_path, w)
        return _answer(go, [{"stage": "correctness", "kind": "problem_error", "reason": f"judge: {e.reason}"}],
                       [], notes)
    timed_refs: dict[str, tuple[list[Any], Any]] = {}
    go = _await_go(go_path, w, lambda: _precompute_timed(w, record_dir, timed_refs))
    t_go = time.perf_counter()
    load_s = [0.0]
    claims = go.get("claims") if isinstance(go.get("claims"), Mapping) else {}
    results = {r.get("name"): r for r in claims.get("results") or [] if isinstance(r, Mapping)}
    passed = {n for n, r in results.items() if r.get("outcome") == "passed"}
    checked: list[str] = []

    def out_of(key: str, stage: str) -> Any:
        t = time.perf_counter()
        try:
            return record.load(record_dir, key, w.device, MAX_RECORD_BYTES)
        except FileNotFoundError:
            raise Finding(stage, "rejected", f"harness_tampering: the worker reported {stage} passed but "
                          f"recorded no output for {key}: its response was not the harness's") from None
        except ValueError as e:
            raise Finding(stage, "rejected", f"harness_tampering: {e}") from None
        finally:
            load_s[0] += time.perf_counter() - t

    def answer(failures: list[dict[str, Any]]) -> dict[str, Any]:
        return {**_answer(go, failures, checked, notes),
                "timings_s": {"judging": round(time.perf_counter() - t_go, 4), "records_load": round(load_s[0], 4)}}

    try:
        with w.hold("shared"), torch.no_grad():
            if "correctness" in passed:
                details = results["correctness"].get("details")
                _correctness(w, planned, visible, details if isinstance(details, Mapping) else {}, record_dir,
                             out_of, checked, notes)
            if "timing" in passed:
                _timed(w, record_dir, out_of, checked, timed_refs)
    except Finding as f:
        return answer([{"stage": f.stage, "kind": f.kind, "reason": f.reason}])
    except StageFailure as e:
        return answer([{"stage": "correctness", "kind": "problem_error", "reason": f"judge: {e.reason}"}])
    return answer([])


def _answer(go: Mapping[str, Any], failures: list[dict[str, Any]], checked: list[str], notes: list[str]) -> dict[str, Any]:
    return {"nonce": str(go.get("nonce", "")), "ok": not failures, "failures": failures, "checked": checked,
            "notes": notes}


def _await_go(path: Path, w: Worker, meanwhile: Callable[[], None] | None = None) -> dict[str, Any]:
    """Wait (the `wait` phase: not this process's work) for the parent's go file, doing
    `meanwhile` between polls."""
    with w.phase("wait"):
        while True:
            try:
                go = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(go, dict):
                    return go
            except (OSError, ValueError):
                pass
            if meanwhile is not None:
                meanwhile()
            time.sleep(GO_POLL_S)


def _precompute_timed(w: Worker, record_dir: Path, done: dict[str, tuple[list[Any], Any]]) -> None:
    """The reference's output for every timed call whose record has appeared, made from its
    seed while the worker finishes: the calls are drawn at random by the worker after the fact,
    so only their names (never their contents) are read before the go file; the comparison
    itself waits for it, and calls recorded later are computed then."""
    pending = [k for k in record.keys(record_dir) if record.parse_timed(k) is not None and k not in done]
    if not pending:
        return
    p = w._programs(need_candidate=False)
    base = int(w.req["timing_seed"])
    with w.hold("shared"), torch.no_grad():
        for key in pending:
            attempt, call = record.parse_timed(key) or (0, 0)
            inputs = w._inputs(p, record.timed_seed(base, attempt, call))
            out = w._call_reference(p.reference, runtime.clone_inputs(inputs))
            done[key] = (record.to_cpu(inputs, keep_other=True), record.to_cpu(out, keep_other=True))  # off the device


def _prepare(w: Worker, notes: list[str]) -> tuple[list[Planned], float]:
    """The sampled calls, drawn here and never shown to the worker, with the reference's
    outputs on their inputs; and the visible output magnitude (the off-distribution
    tolerance's scale)."""
    p = w._programs(need_candidate=False)
    seeds = [int(s) for s in w.req["seeds"]]
    rng = secrets.SystemRandom()
    planned: list[Planned] = []

    def plan(key: str, what: str, inputs: list[Any], model: torch.nn.Module | None = None) -> Any:
        ref_out = w._call_reference(model if model is not None else p.reference, runtime.clone_inputs(inputs))
        planned.append(Planned(key, what, record.to_cpu(inputs, keep_other=True), record.to_cpu(ref_out, keep_other=True),
                               model))
        return ref_out

    first = w._inputs(p, seeds[0])
    visible = params.output_magnitude(w._call_reference(p.reference, runtime.clone_inputs(first)))
    seed = rng.choice(seeds)
    plan(record.trial_key(seed), f"trial seed {seed}", w._inputs(p, seed))
    ref, _state, why = params.randomised_reference(p.reference, seeds[0] + 7)
    if ref is None:
        notes.append(f"randomised parameters: {why}")
    else:
        plan(record.params_key(seeds[0] + 7), "with randomised parameters", w._inputs(p, seeds[0] + 7), ref)
    scale = params.off_scale(w.req.get("off_distribution", True))
    if scale is None:
        notes.append("off-distribution: the problem opts out")
    else:
        inputs = params.off_distribution_inputs(w, seeds[0] + 11, scale)
        out = plan(record.offdist_key(seeds[0] + 11), f"with inputs off get_inputs()'s distribution "
                   f"(scaled by {scale:g})", inputs)
        if not params.finite(out):
            planned.pop()
            notes.append(f"off-distribution: the reference is not finite on inputs scaled by {scale:g}")
    return planned, visible


def _fail(stage: str, check: str, what: str, cmp: Any) -> Finding:
    return Finding(stage, cmp.kind or "wrong_output", f"{check}: {what}: {cmp.reason} (checked by the judge, a "
                   "process that never ran the candidate, against the output the worker recorded)")


def _correctness(w: Worker, planned: list[Planned], visible: float, claim: Mapping[str, Any], record_dir: Path,
                 out_of: Callable[[str, str], Any], checked: list[str], notes: list[str]) -> None:
    present = set(record.keys(record_dir))
    for seed in (int(s) for s in w.req["seeds"]):  # every trial was recorded
        if record.trial_key(seed) not in present:
            out_of(record.trial_key(seed), "correctness")  # raises: missing
    skipped = claim.get("randomised_parameters")
    skipped = skipped.get("skipped") if isinstance(skipped, Mapping) else None
    for item in planned:
        if item.key.startswith("params-") and skipped:
            notes.append(f"randomised parameters: not checked, the worker says: {skipped}")
            continue
        cand = out_of(item.key, "correctness")
        inputs = record.to_device(item.inputs, w.device)
        ref_out = record.to_device(item.ref_out, w.device)
        if item.model is not None:
            cmp = params.judge_randomised(w, item.model, ref_out, cand, inputs)
        elif item.key.startswith("offdist-"):
            cmp, _grow = params.judge_off_distribution(w, ref_out, cand, inputs, visible)
        else:
            cmp = w.judge(ref_out, cand, inputs, report_anchor=False)
        if not cmp.ok:
            raise _fail("correctness", "judge", item.what, cmp)
        checked.append(item.key)


def _timed(w: Worker, record_dir: Path, out_of: Callable[[str, str], Any], checked: list[str],
           precomputed: Mapping[str, tuple[list[Any], Any]]) -> None:
    p = w._programs(need_candidate=False)
    calls = sorted(k for k in record.keys(record_dir) if record.parse_timed(k) is not None)
    if not calls:
        raise Finding("timing", "rejected", "harness_tampering: the worker reported timing passed but recorded "
                      "no timed call's output: its response was not the harness's")
    base = int(w.req["timing_seed"])
    for key in calls:
        attempt, call = record.parse_timed(key) or (0, 0)
        if key in precomputed:
            inputs, ref_out = (record.to_device(x, w.device) for x in precomputed[key])
        else:
            inputs = w._inputs(p, record.timed_seed(base, attempt, call))
            ref_out = w._call_reference(p.reference, runtime.clone_inputs(inputs))
        cmp = w.judge(ref_out, out_of(key, "timing"), inputs, report_anchor=False)
        if not cmp.ok:
            raise _fail("timing", "timed_outputs", f"the output of timed call {call} (attempt {attempt}) differs "
                        "from the reference on the same inputs (honest only outside timing?)", cmp)
        checked.append(key)
