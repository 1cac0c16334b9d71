"""Owns the judge: the correctness verdict, decided in a process where candidate code never ran.

The worker runs the candidate, so anything it reports can be forged by code that reaches its
frames (it can write a response in which every stage passed and exit). The judge is a
separate sandboxed process, started beside the worker from the parent's copy of the request.
It loads only the problem, and checks the candidate outputs the worker records (record.py)
against the reference, which it runs itself on the same inputs, made from the request's
seeds on the device, by the same rule and code as the worker:

- a record that travels by CUDA IPC (on a GPU) is checked as it arrives, in place on the
  device, while the worker waits: every one of them (each correctness trial, the
  randomised-parameters trial, the off-distribution trial, every timed call recorded);
- a record written as a file (the CPU, or an output IPC cannot carry) is checked when it is
  one of the judge's secret sample: one correctness trial drawn at random (the trials come
  from one distribution; the worker compared them all), the randomised-parameters and
  off-distribution trials, and every timed call (the worker only records these).

The verdict waits for the worker's end: when the worker has ended (its strays killed) and
said every stage passed, the parent hands the judge the worker's response and a fresh nonce
(the `go` file), and the judge answers with its findings for the stages the worker claims:
every correctness trial must have a record, the randomised-parameters trial unless the
reference has no floating state (checked here) or the worker says the candidate's state does
not map onto the reference's (a claim the judge cannot check: the answer notes it), the
off-distribution trial unless the problem opts out or the reference is not finite there
(checked here), and at least one timed call. A missing or unreadable record fails its stage
as tampering: the worker claimed a check it did not make. The answer carries the nonce, so an
answer provoked by a `go` file the candidate wrote itself is refused by the parent. What
stays in the candidate's process: the integrity and shapes stages' comparisons and the
timing samples.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from stratagem.domains.pytorch.worker import params, precision, record, roofline, runtime
from stratagem.domains.pytorch.worker.referee import Referee, device_request
from stratagem.worker_api.stages import Emit, StageFailure

MAX_RECORD_BYTES = 1 << 34
"""The largest recorded output file the judge reads (16 GiB)."""
GO_POLL_S = 0.005


class Finding(Exception):
    def __init__(self, stage: str, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.stage, self.kind, self.reason = stage, kind, reason


def _stage_of(key: str) -> str:
    return "timing" if record.parse_timed(key) is not None else "correctness"


class Judging:
    """The judge's state: which calls it samples, what it has checked, what it found."""

    def __init__(self, w: Referee, record_dir: Path, notes: list[str]) -> None:
        self.w, self.dir, self.notes = w, record_dir, notes
        self.seeds = [int(s) for s in w.req["seeds"]]
        self.sampled_trial = record.trial_key(secrets.SystemRandom().choice(self.seeds))
        self.params_key = record.params_key(self.seeds[0] + 7)
        self.offdist = {record.offdist_key(self.seeds[0] + 11, scale): scale
                        for scale in params.off_scales(w.req.get("off_distribution", True))}
        """The off-distribution trials' records by their input scale (none: the problem opts out)."""
        self.checked: dict[str, str] = {}
        """key -> how its record came (`ipc` or `file`)."""
        self.findings: list[Finding] = []
        self.provisional: list[Finding] = []
        """Calls that passed only within the error the reference's precision predicts: findings
        unless the worker's evidence says the design computed at that precision (`settle`)."""
        self.refused: set[str] = set()
        """IPC records the judge could not read (the worker writes them as files instead)."""
        self._visible: float | None = None
        self.work: dict[str, Any] | None = None
        """The reference's FLOPs and minimum bytes (the roofline's input), once counted."""
        """Count the work while the worker runs (on a GPU machine, whose cores are idle then);
        on the CPU it would compete with the worker for the cores, so it waits for its end."""
        self.work_s = 0.0
        self.load_s = 0.0

    # -- what the judge expects --------------------------------------------------------

    def known(self, key: str) -> bool:
        return (key in {record.trial_key(s) for s in self.seeds} or key == self.params_key or key in self.offdist
                or record.parse_timed(key) is not None)

    def sampled(self, key: str) -> bool:
        """Checked when it comes as a file: the drawn trial, the two randomised trials, every
        timed call."""
        return (key in (self.sampled_trial, self.params_key) or key in self.offdist
                or record.parse_timed(key) is not None)

    # -- checking ----------------------------------------------------------------------

    def poll(self) -> None:
        """Check what has arrived: every IPC record (then answer it), and the sampled file
        records (under the shared lock: the worker does not wait for these)."""
        t0 = time.perf_counter()
        try:
            for key in record.ipc_keys(self.dir):
                if key in self.checked or key in self.refused or not self.known(key):
                    continue
                with self.w.phase("run"):
                    self._check_ipc(key)
            pending = [k for k in record.keys(self.dir) if k not in self.checked and self.known(k) and self.sampled(k)]
            if pending:
                with self.w.phase("run"), self.w.hold("shared"):
                    for key in pending:
                        self._check_file(key)
        finally:
            self.work_s += time.perf_counter() - t0

    def _check_ipc(self, key: str) -> None:
        try:
            out = record.read_ipc(self.dir, key, self.w.device)
        except ValueError as e:
            self.refused.add(key)
            record.answer_ipc(self.dir, key, f"unreadable: {e}")
            return
        try:
            with torch.no_grad():
                self.check(key, out, "ipc")
            del out
            runtime.synchronize(self.w.device)  # done with the worker's memory before answering
        finally:
            record.answer_ipc(self.dir, key, "received")

    def _check_file(self, key: str) -> None:
        t = time.perf_counter()
        try:
            out = record.load(self.dir, key, self.w.device, MAX_RECORD_BYTES)
        except (FileNotFoundError, ValueError) as e:
            self.findings.append(Finding(_stage_of(key), "rejected", f"harness_tampering: {e}"))
            self.checked[key] = "file"
            return
        finally:
            self.load_s += time.perf_counter() - t
        with torch.no_grad():
            self.check(key, out, "file")

    def check(self, key: str, cand: Any, how: str) -> None:
        """Compare the candidate's output of call `key` with the reference's on the same
        inputs; a disagreement is kept as a finding."""
        w = self.w
        p = w.loaded(need_candidate=False)
        timed = record.parse_timed(key)
        self.checked[key] = how
        try:
            if timed is not None:
                inputs = w.make_inputs(p, record.timed_seed(int(w.req["timing_seed"]), *timed))
                ref_out = w.call_reference(p.reference, runtime.clone_inputs(inputs))
                cmp = w.judge(ref_out, cand, inputs, report_anchor=False)
                what = (f"timed_outputs: the output of timed call {timed[1]} (attempt {timed[0]}) differs from the "
                        "reference on the same inputs (honest only outside timing?)")
            elif key == self.params_key:
                state = params.randomised_state(p.reference, self.seeds[0] + 7)
                if not state:
                    self.notes.append("randomised parameters: the reference has no floating parameters or buffers")
                    return
                inputs = w.make_inputs(p, self.seeds[0] + 7)
                with params.randomised(p.reference, state) as ref:
                    ref_out = w.call_reference(ref, runtime.clone_inputs(inputs))
                    cmp = params.judge_randomised(w, ref, ref_out, cand, inputs)
                what = "judge: with randomised parameters"
            elif key in self.offdist:
                scale = self.offdist[key]
                visible = self.visible()  # first: its inputs and output are gone before these come
                inputs = params.off_distribution_inputs(w, self.seeds[0] + 11, scale)
                ref_out = w.call_reference(p.reference, runtime.clone_inputs(inputs))
                cmp, _grow = params.judge_off_distribution(w, ref_out, cand, inputs, visible)
                what = f"judge: with inputs off get_inputs()'s distribution (scaled by {scale:g})"
            else:
                seed = int(key.removeprefix("trial-"))
                inputs = w.make_inputs(p, seed)
                ref_out = w.call_reference(p.reference, runtime.clone_inputs(inputs))
                cmp = w.judge(ref_out, cand, inputs, report_anchor=False)
                what = f"judge: trial seed {seed}"
        except StageFailure as e:  # the reference failed here (or ran out of memory: `call_reference`)
            self.findings.append(Finding("correctness", e.kind, f"judge: {e.reason}"))
            return
        if not cmp.ok:
            self.findings.append(Finding(_stage_of(key), cmp.kind or "wrong_output", f"{what}: {cmp.reason} (checked "
                                         "by the judge, a process that never ran the candidate, against the output "
                                         "the worker recorded)"))
        elif getattr(cmp, "allowance", False):
            self.provisional.append(Finding(_stage_of(key), "wrong_output", f"{what}: within only the error the "
                                            "reference's precision predicts, and the worker did not see the design "
                                            "compute at that precision"))

    def settle(self, claim: Mapping[str, Any]) -> None:
        """The provisional findings become findings unless the worker's correctness details
        say the design's precision was seen at the reference's or higher."""
        evidence = claim.get("precision_evidence")
        if not (isinstance(evidence, Mapping) and evidence.get("seen") is True):
            self.findings.extend(self.provisional)

    def count_work(self) -> None:
        """The reference's FLOPs and minimum bytes on the timing's first input set (the
        worker's warm-up inputs: the same shapes as every timed call), under the shared lock."""
        w = self.w
        p = w.loaded(need_candidate=False)
        # the compile limit: most of it is waiting for torch._dynamo's import (preload_work_counter)
        with w.phase("compile"), w.hold("shared"), torch.no_grad():
            inputs = w.make_inputs(p, record.warm_seed(int(w.req["timing_seed"]), 0))
            self.work = roofline.count_work(p.reference, inputs)
        del inputs
        runtime.free_memory()

    def visible(self) -> float:
        """The reference output's magnitude on the first trial's inputs (the off-distribution
        tolerance's scale)."""
        if self._visible is None:
            p = self.w.loaded(need_candidate=False)
            out = self.w.call_reference(p.reference, self.w.make_inputs(p, self.seeds[0]))
            self._visible = params.output_magnitude(out)
        return self._visible

    # -- after the worker --------------------------------------------------------------

    def require(self, key: str, stage: str) -> None:
        """`key` must have been recorded and, when sampled, checked."""
        if key in self.checked:
            return
        if key in record.keys(self.dir):
            if self.sampled(key):
                with self.w.hold("shared"):
                    self._check_file(key)
            return
        raise Finding(stage, "rejected", f"harness_tampering: the worker reported {stage} passed but recorded no "
                      f"output for {key}: its response was not the harness's")

    def correctness(self, claim: Mapping[str, Any]) -> None:
        for seed in self.seeds:
            self.require(record.trial_key(seed), "correctness")
        skipped = claim.get("randomised_parameters")
        skipped = skipped.get("skipped") if isinstance(skipped, Mapping) else None
        has_state = any(t.is_floating_point() and t.numel() for t in self.w.loaded(False).reference.state_dict().values())
        if not has_state:
            self.notes.append("randomised parameters: the reference has no floating parameters or buffers")
        elif skipped and self.params_key not in self.checked and self.params_key not in record.keys(self.dir):
            self.notes.append(f"randomised parameters: not checked, the worker says: {skipped}")
        else:
            self.require(self.params_key, "correctness")
        if not self.offdist:
            self.notes.append("off-distribution: the problem opts out")
        for key, scale in self.offdist.items():
            if key in self.checked or key in record.keys(self.dir):
                self.require(key, "correctness")
                continue
            p = self.w.loaded(False)  # the worker records nothing where the reference is not finite: check that
            with self.w.hold("shared"):
                out = self.w.call_reference(p.reference, params.off_distribution_inputs(
                    self.w, self.seeds[0] + 11, scale))
            if params.finite(out):
                self.require(key, "correctness")  # raises: missing
            self.notes.append(f"off-distribution: the reference is not finite on inputs scaled by {scale:g}")

    def timing(self) -> None:
        calls = sorted({k for k in [*record.keys(self.dir), *self.checked] if record.parse_timed(k) is not None})
        if not calls:
            raise Finding("timing", "rejected", "harness_tampering: the worker reported timing passed but recorded "
                          "no timed call's output: its response was not the harness's")
        for key in calls:
            self.require(key, "timing")

    def first_finding(self, stages: set[str]) -> Finding | None:
        return next((f for f in self.findings if f.stage in stages), None)


def run_judge(request: Mapping[str, Any], go_path: Path, record_dir: Path, workdir: Path,
              emit: Emit) -> dict[str, Any]:
    """Load, check records as they arrive, wait for `go_path`, answer for the claimed stages.
    Returns {nonce, ok, failures, checked, notes, timings_s}."""
    request = device_request(request)
    on_gpu = str(request["device"]).startswith("cuda")
    count = bool(request.get("count_work", True))  # False: an earlier evaluation counted it
    if on_gpu and count:  # counting the reference's work imports torch._dynamo on first use: meanwhile, on a thread
        threading.Thread(target=roofline.preload_work_counter, daemon=True).start()
    w = Referee(request, emit)  # no candidate code runs here: no guard, builds or recorder
    # the design's precision is the worker's to see: the judge admits the error its precision
    # predicts provisionally, and settles at the worker's end (`Judging.settle`)
    w.evidence_override = precision.Evidence(True, "provisional: the worker's evidence decides")
    notes: list[str] = []
    try:
        with w.phase("compile"):  # the start, as the worker's: the compile limit
            w.load_reference(workdir)
    except StageFailure as e:  # the problem itself failed here: not the candidate's doing
        go = _await_go(go_path, w)
        return _answer(go, [{"stage": "correctness", "kind": e.kind, "reason": f"judge: {e.reason}"}],
                       [], notes)
    # The work is counted after the worker's end, not at the first poll: counting waits for
    # torch._dynamo's import (4-5 s), and every IPC record the worker sent meanwhile waited
    # with it (a KernelBench ReLU's correctness stage went from 1.9 s to 7.5 s on an H200).
    # By the worker's end the import on the thread above is long done.
    j = Judging(w, record_dir, notes)
    go = _await_go(go_path, w, j.poll)
    t_go = time.perf_counter()
    before_go_s = j.work_s
    claims = go.get("claims")
    claims = claims if isinstance(claims, Mapping) else {}
    results = {r.get("name"): r for r in claims.get("results") or [] if isinstance(r, Mapping)}
    passed = {n for n, r in results.items() if r.get("outcome") == "passed"}
    judged = {"correctness", "timing"} & passed

    def answer(failures: list[dict[str, Any]]) -> dict[str, Any]:
        checked = sorted(k for k in j.checked if _stage_of(k) in judged)
        by = {how: sum(1 for k in checked if j.checked[k] == how) for how in ("ipc", "file")}
        notes.append(f"records checked: {by['ipc']} in place on the device (CUDA IPC), {by['file']} from files")
        return {**_answer(go, failures, checked, notes), "work": j.work,
                "timings_s": {"judging": round(time.perf_counter() - t_go, 4), "records_load": round(j.load_s, 4),
                              "before_worker_end": round(before_go_s, 4)}}

    missing: Finding | None = None
    try:
        with torch.no_grad():
            if "correctness" in passed:
                details = results["correctness"].get("details")
                j.correctness(details if isinstance(details, Mapping) else {})
                j.settle(details if isinstance(details, Mapping) else {})
            if "timing" in passed:
                j.timing()
                if j.work is None and count:
                    j.count_work()
    except Finding as f:
        missing = f
    except StageFailure as e:
        return answer([{"stage": "correctness", "kind": e.kind, "reason": f"judge: {e.reason}"}])
    found = j.first_finding(judged) or missing  # what a record showed says more than what is missing
    return answer([] if found is None else [{"stage": found.stage, "kind": found.kind, "reason": found.reason}])


def _answer(go: Mapping[str, Any], failures: list[dict[str, Any]], checked: list[str], notes: list[str]) -> dict[str, Any]:
    return {"nonce": str(go.get("nonce", "")), "ok": not failures, "failures": failures, "checked": checked,
            "notes": notes}


def _await_go(path: Path, w: Referee, meanwhile: Callable[[], None] | None = None) -> dict[str, Any]:
    """Wait (the `wait` phase: not this process's work) for the parent's go file, doing
    `meanwhile` between polls."""
    with w.phase("wait"):
        while True:
            if meanwhile is not None:
                meanwhile()
            try:
                go = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(go, dict):
                    return go
            except (OSError, ValueError):
                pass
            time.sleep(GO_POLL_S)
