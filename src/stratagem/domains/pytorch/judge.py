"""Owns the judge: the correctness verdict, decided in a process where candidate code never ran.

The worker runs the candidate, so anything it reports can be forged by code that reaches its
frames (it can write a response in which every stage passed and exit). The judge runs after
the worker has ended, in a fresh process of its own, from the parent's copy of the request.
It loads only the problem, makes every deciding call's inputs from the request's seeds, runs
the reference itself and compares the candidate outputs the worker recorded (record.py) by
the same rule, with the same code as the worker:

- every correctness trial (`trial-SEED`, one per seed: none may be missing);
- the randomised-parameters trial (`params-SEED`), unless the worker says the candidate's
  state does not map onto the reference's (a claim the judge cannot check; the details say so);
- the off-distribution trial (`offdist-SEED`), unless the problem opts out or the reference is
  not finite there (the judge checks that itself);
- the timed calls drawn for checking (`timed-ATTEMPT-CALL`, at least one when timing passed).

A missing or unreadable record fails the stage it belongs to as tampering: the worker claimed
a check it did not make. What stays in the candidate's process: the integrity and shapes
stages' comparisons and the timing samples (the reference's side of a timing is checked
against the invocation's own baseline, which no candidate runs in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from stratagem.domains.pytorch import params, record, runtime
from stratagem.domains.pytorch.runtime import StageFailure
from stratagem.domains.pytorch.stages import Emit, Worker, prepare_device

MAX_RECORD_BYTES = 1 << 32
"""The largest recorded output the judge reads (4 GiB)."""


class Finding(Exception):
    def __init__(self, stage: str, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.stage, self.kind, self.reason = stage, kind, reason


def run_judge(request: Mapping[str, Any], claims: Mapping[str, Any], record_dir: Path, workdir: Path,
              emit: Emit) -> dict[str, Any]:
    """Judge the recorded outputs. `claims` is the worker's response (untrusted): which stages
    it says passed, and its trial details. Returns {ok, failures, checked, notes}."""
    request = prepare_device(request)
    results = {r.get("name"): r for r in claims.get("results") or [] if isinstance(r, Mapping)}
    passed = {n for n, r in results.items() if r.get("outcome") == "passed"}
    w = Worker({**request, "candidate": None, "judge": False}, workdir, emit)
    w.stage_load()
    checked: list[str] = []
    notes: list[str] = []
    device = w.device

    def out_of(key: str, stage: str) -> Any:
        try:
            return record.load(record_dir, key, device, MAX_RECORD_BYTES)
        except FileNotFoundError:
            raise Finding(stage, "rejected", f"harness_tampering: the worker reported {stage} passed but "
                          f"recorded no output for {key}: its response was not the harness's") from None
        except ValueError as e:
            raise Finding(stage, "rejected", f"harness_tampering: {e}") from None

    try:
        with w.hold("shared"), torch.no_grad():
            if "correctness" in passed:
                _correctness(w, results["correctness"], out_of, checked, notes)
            if "timing" in passed:
                _timed(w, record_dir, out_of, checked)
    except Finding as f:
        return {"ok": False, "failures": [{"stage": f.stage, "kind": f.kind, "reason": f.reason}],
                "checked": checked, "notes": notes}
    except StageFailure as e:  # the reference itself failed here: not the candidate's doing
        return {"ok": False, "failures": [{"stage": "correctness", "kind": "problem_error",
                                           "reason": f"judge: {e.reason}"}], "checked": checked, "notes": notes}
    return {"ok": True, "failures": [], "checked": checked, "notes": notes}


def _fail(stage: str, what: str, cmp: Any) -> Finding:
    return Finding(stage, cmp.kind or "wrong_output", f"judge: {what}: {cmp.reason} (checked by the judge, a "
                   "process that never ran the candidate, against the output the worker recorded)")


def _correctness(w: Worker, claim: Mapping[str, Any], out_of: Callable[[str, str], Any], checked: list[str],
                 notes: list[str]) -> None:
    p = w._programs(need_candidate=False)
    seeds = [int(s) for s in w.req["seeds"]]
    trials, visible = [], 0.0
    for n, seed in enumerate(seeds):
        inputs = w._inputs(p, seed)
        ref_out = w._call_reference(p.reference, runtime.clone_inputs(inputs))
        key = record.trial_key(seed)
        cmp = w.judge(ref_out, out_of(key, "correctness"), inputs)
        if n == 0:
            visible = params.output_magnitude(ref_out)
        if not cmp.ok:
            raise _fail("correctness", f"trial seed {seed}", cmp)
        trials.append(cmp.to_json())
        checked.append(key)
    w.calibrate_atol(trials)
    details = claim.get("details") if isinstance(claim.get("details"), Mapping) else {}
    seed0 = seeds[0]
    ref, _state, why = params.randomised_reference(p.reference, seed0 + 7)
    skipped = (details.get("randomised_parameters") or {}).get("skipped") if isinstance(
        details.get("randomised_parameters"), Mapping) else None
    if ref is None:
        notes.append(f"randomised parameters: {why}")
    elif skipped:
        notes.append(f"randomised parameters: not checked, the worker says: {skipped}")
    else:
        inputs = w._inputs(p, seed0 + 7)
        ref_out = w._call_reference(ref, runtime.clone_inputs(inputs))
        key = record.params_key(seed0 + 7)
        cmp = params.judge_randomised(w, ref, ref_out, out_of(key, "correctness"), inputs)
        if not cmp.ok:
            raise _fail("correctness", "with randomised parameters", cmp)
        checked.append(key)
    scale = params.off_scale(w.req.get("off_distribution", True))
    if scale is None:
        notes.append("off-distribution: the problem opts out")
        return
    inputs = params.off_distribution_inputs(w, seed0 + 11, scale)
    ref_out = w._call_reference(p.reference, runtime.clone_inputs(inputs))
    if not params.finite(ref_out):
        notes.append(f"off-distribution: the reference is not finite on inputs scaled by {scale:g}")
        return
    key = record.offdist_key(seed0 + 11)
    cmp, _grow = params.judge_off_distribution(w, ref_out, out_of(key, "correctness"), inputs, visible)
    if not cmp.ok:
        raise _fail("correctness", f"with inputs off get_inputs()'s distribution (scaled by {scale:g})", cmp)
    checked.append(key)


def _timed(w: Worker, record_dir: Path, out_of: Callable[[str, str], Any], checked: list[str]) -> None:
    from stratagem.domains.pytorch import compare

    p = w._programs(need_candidate=False)
    calls = sorted(k for k in record.keys(record_dir) if record.parse_timed(k) is not None)
    if not calls:
        raise Finding("timing", "rejected", "harness_tampering: the worker reported timing passed but recorded "
                      "no timed call's output: its response was not the harness's")
    base = int(w.req["timing_seed"])
    for key in calls:
        attempt, call = record.parse_timed(key) or (0, 0)
        inputs = w._inputs(p, record.timed_seed(base, attempt, call))
        ref_out = w._call_reference(p.reference, runtime.clone_inputs(inputs))
        cmp = compare.compare_outputs(ref_out, out_of(key, "timing"), w.tolerances())
        if not cmp.ok:
            raise _fail("timing", f"timed_outputs: timed call {call} (attempt {attempt})", cmp)
        checked.append(key)
