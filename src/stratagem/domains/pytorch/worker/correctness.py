"""Owns the PyTorch domain's correctness stage in the worker: the trials on fresh seeded
inputs (the candidate on its own copy first, then the reference; the float64 anchor where it
decides or is cheap), with the randomised-parameters and off-distribution trials
(`params.py`) after the first one.

Worker-side only. The rule in force (`Worker.compare_with_anchor`, `Worker.mode_details`) and
the atol of the later comparisons against eager (`Worker.calibrate_atol`) stay the Worker's:
the integrity, shapes and breach-audit stages judge by them too.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import compare, params, precision, provenance, record, runtime
from stratagem.worker_api.stages import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.stages import Worker


def watch_design(w: Worker, p: runtime.Programs, seed: int) -> None:
    """The design's precision (`precision.watching`): one call of its own on the first
    trial's inputs before the trials, compiled code run eagerly (its own operators, at the
    precision the compiled code runs them), its Triton launches and own native extensions
    noted. The call is the design's first: Triton's compiles count against the compile limit,
    torch.compile's first compile still happens in the first trial, and a failure here is the
    design's (raised as a trial's would be)."""
    inputs = w.make_inputs(p, seed)
    assert p.candidate is not None
    try:  # no tamper look: the watch is a torch-function mode of the harness's own
        with torch.no_grad(), w.compiling(), precision.watching(w.device, design=True) as seen:
            out = w.call_candidate(p.candidate, inputs, look=False)
        del out
    finally:  # a failure is the design's, as in a trial (out of memory beside others: run again alone)
        del inputs
        runtime.free_memory()
    seen.opaque = sorted(m.__name__ for m in provenance.own_extensions(p.candidate_module, p.candidate))
    w.design_precision = seen


def run_correctness(w: Worker) -> dict[str, Any]:
    """Trials on fresh seeded inputs: the candidate against eager (and, where it decides or
    is cheap, both against the float64 anchor: `anchor_wanted`). The fixed rule judges
    against eager with the per-dtype tolerances; the calibrated rule against the anchor,
    within a factor of eager's own error.

    Memory: each trial holds its inputs, the candidate's copy of them, the two outputs and
    (when anchored) the float64 run; the candidate runs first, on its own copy, so the
    generated inputs stay pristine for the mutation check and the anchor, and the reference
    then runs on them."""
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None
    trials: list[dict[str, Any]] = []
    seeds = [int(x) for x in w.req["seeds"]]
    trials_details: dict[str, Any] = {}
    anchored: list[int] = []
    visible = 0.0  # the reference output's magnitude on the visible distribution (first trial)
    if w.mode() == "reference":
        watch_design(w, p, seeds[0])
    for n, seed in enumerate(seeds):
        w.last_inputs = None  # the previous trial's: not held while this one runs (memory.py)
        if n == 1:
            # after the first trial (which compiles), never last: the integrity stage
            # refills the last trial's very tensors, which the candidate saw last
            trials_details = {**params.run_trial(w, seeds[0] + 7),
                              **params.run_off_distribution(w, seeds[0] + 11, visible)}
        inputs = w.make_inputs(p, int(seed))
        cand_in = runtime.clone_inputs(inputs)
        with torch.no_grad():
            # The first call compiles (torch.compile, Triton autotuning): the compile budget.
            with w.compiling() if not trials else contextlib.nullcontext():
                cand_out = w.call_candidate(p.candidate, cand_in)
        changed = compare.inputs_unchanged(inputs, cand_in)
        if changed is not None:
            raise StageFailure("wrong_output", f"trial seed {seed}: the candidate changed its inputs: {changed}",
                               {"trials": trials, **w.mode_details(anchored)})
        w.recorder.save(record.trial_key(int(seed)), cand_out)
        anchor = w.anchor(inputs) if w.anchor is not None and w.anchor_wanted(n, inputs) else None
        if anchor is not None:
            anchored.append(int(seed))
        with torch.no_grad(), (precision.watching(w.device) if n == 0 else contextlib.nullcontext()) as seen:
            ref_out = w.call_reference(p.reference, inputs)
        if seen is not None:
            w.precision = seen

        def fresh_anchor(seed: int = int(seed)) -> Any:
            # the inputs made again: the reference may have written into its own
            out = w.anchor(w.make_inputs(p, seed)) if w.anchor is not None else None
            if out is not None:
                anchored.append(seed)
            return out

        cmp = w.compare_with_anchor(ref_out, cand_out, anchor, fresh_anchor)
        if cmp.kind != "malformed":
            passed = w.req["tolerances"] if cmp.ok and cmp.decided_by == "fixed" else None
            bench = compare.benchmark_verdicts(ref_out, cand_out, passed)
        else:
            bench = dict.fromkeys(compare.BENCHMARK_RULES, False)
        if not trials:
            visible = params.output_magnitude(ref_out)
        trials.append({"seed": int(seed), **cmp.to_json(), "benchmarks": bench})
        w.last_inputs = cand_in  # the integrity stage refills these very tensors
        del ref_out, cand_out, inputs, anchor
        runtime.free_memory()
        if not cmp.ok:
            raise StageFailure(cmp.kind, f"trial seed {seed}: {cmp.reason}",
                               {"trials": trials, **w.mode_details(anchored, trials)})
    if len(seeds) == 1:  # a single trial: the randomised ones come after it
        trials_details = {**params.run_trial(w, seeds[0] + 7),
                          **params.run_off_distribution(w, seeds[0] + 11, visible)}
    w.calibrate_atol(trials)
    return {
        "trials": trials,
        "max_abs_err": max(t["max_abs_err"] for t in trials),
        "max_rel_err": max(t["max_rel_err"] for t in trials),
        **trials_details,
        **w.mode_details(anchored, trials),
        **({"records": dict(w.recorder.transports)} if w.recorder.directory is not None else {}),
    }
