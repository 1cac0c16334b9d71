"""Owns what the worker and the judge share: `Referee`, the request read-only, the problem's
reference loaded, inputs made from seeds, guarded reference calls and the correctness rule in
force (the float64 anchor, the tolerances).

Worker-side only. `stages.Worker` adds the candidate (its load, builds, guarded calls, the
recorder and the harness's snapshot); the judge (`judge.py`), a process where candidate code
never runs, builds a `Referee` alone, so it loads none of that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from stratagem.domains.pytorch.worker import compare, precision, runtime
from stratagem.domains.pytorch.worker.anchor import Anchor
from stratagem.domains.pytorch.worker.device_use import DeviceUse
from stratagem.domains.pytorch.worker.runtime import Programs
from stratagem.worker_api.stages import Emit, StageFailure


class Referee(DeviceUse):
    """The reference side of one request (its device use: `DeviceUse`)."""

    def __init__(self, request: Mapping[str, Any], emit: Emit | None = None) -> None:
        super().__init__(request, emit)
        self.req = freeze(request)  # read-only: candidate code cannot loosen tolerances
        self.programs: Programs | None = None
        self.poisoned: str | None = None
        self.anchor: Anchor | None = None
        self.rule: Mapping[str, Any] = dict(request.get("correctness") or {"mode": "reference"})
        self._calibrated_atol: float | None = None
        """Set by the correctness trials where the anchor decided one (the calibrated rule, or
        the reference rule after the fixed check failed): the atol that later comparisons
        against eager (integrity, shapes) use, (factor + 1) x eager's largest error against
        the anchor plus the floor and the tolerance's atol (if |c - a| <= f e + t and
        |r - a| <= e, then |c - r| <= (f + 1) e + t)."""
        self.precision: precision.RanPrecision | None = None
        """What the reference computed in, seen on the first correctness trial."""
        self.design_precision: precision.RanPrecision | None = None
        """What the design computed in, seen on its watched call (`correctness.watch_design`)."""
        self.evidence_override: precision.Evidence | None = None
        """The evidence where no design is watched: a compiled baseline (`precision.INHERITED`),
        the judge (the worker's evidence decides at its end: `judge.Judging.settle`)."""
        self.ref_errors: list[float] = []
        """Per floating output, eager's largest error against float64 across the trials so far."""

    def load_reference(self, workdir: Path) -> Programs:
        """Import the problem's reference in `workdir` and instantiate `Model` (with its float64
        anchor).

        Raises:
            StageFailure: the problem, not a candidate, is broken.
        """
        try:
            ref_mod = runtime.load_module(runtime.REFERENCE_MODULE, self.req["problem"]["source"], workdir,
                                          "reference.py")
            with self.hold("shared"):
                init_inputs = runtime.init_inputs(ref_mod, int(self.req["init_seed"]), self.device)
                ref = runtime.instantiate(ref_mod.Model, init_inputs, int(self.req["init_seed"]), self.device)
        except Exception as e:
            raise StageFailure(
                runtime.problem_kind(e), f"the reference problem failed to load: {runtime.one_line(e)}",
                {"traceback": runtime.format_exception(e)},
            ) from e
        self.programs = Programs(reference_module=ref_mod, reference=ref, init_inputs=init_inputs)
        self.anchor = Anchor(ref, self.device)
        return self.programs

    def mode(self) -> str:
        """The rule in force: `calibrated` only while an anchor can be computed (else `fixed`);
        `reference` (without an anchor its second look cannot be had: the fixed check decides)."""
        mode = str(self.rule.get("mode") or "reference")
        if mode == "calibrated" and self.anchor is not None and self.anchor.unavailable is not None:
            return "fixed"
        return mode

    def judge(self, ref_out: Any, cand_out: Any, inputs: list[Any], report_anchor: bool = True) -> compare.Comparison:
        """Compare by the rule in force, with both outputs' errors against the anchor (in the
        fixed mode only when `report_anchor`: there it decides nothing; in the reference mode
        when the fixed check fails, where its second look needs it)."""
        want = report_anchor or self.rule.get("mode") == "calibrated"
        anchor = self.anchor(inputs) if self.anchor is not None and want else None
        return self.compare_with_anchor(ref_out, cand_out, anchor,
                                        lambda: self.anchor(inputs) if self.anchor is not None else None)

    def compare_with_anchor(self, ref_out: Any, cand_out: Any, anchor: Any,
                            anchor_of: Callable[[], Any] | None = None) -> compare.Comparison:
        """Compare by the rule in force, given the float64 anchor's output (or None, and
        `anchor_of` to compute it where the reference rule needs it: a failed fixed check)."""
        mode = self.mode()
        if anchor is not None and mode == "calibrated":
            return compare.calibrated_compare(anchor, ref_out, cand_out, self.rule)
        tol = self.req["tolerances"]
        cmp = compare.compare_outputs(ref_out, cand_out, tol)
        if cmp.kind == "malformed" and not cmp.ok:
            return cmp
        evidence = self.evidence() if mode == "reference" else None
        if evidence is not None and evidence.downgrade is not None:
            return compare.Comparison(False, f"precision downgrade: {evidence.downgrade}; the default rule holds a "
                                      "design to the precision the reference ran at, whatever its error",
                                      max_abs_err=cmp.max_abs_err, max_rel_err=cmp.max_rel_err,
                                      checked=cmp.checked, decided_by="precision")
        if anchor is None and not cmp.ok and anchor_of is not None:
            anchor = anchor_of()  # decides under the reference rule; reported under the fixed one
        if anchor is None:
            return cmp
        if not cmp.ok and mode == "reference":
            out = compare.reference_compare(anchor, ref_out, cand_out, self.rule, tol, cmp,
                                            seen=evidence is not None and evidence.seen, ref_errors=self.ref_errors)
            self._note_ref_errors(out)
            if not out.ok and evidence is not None:
                out.reason = f"{out.reason} (precision: {evidence.words})"
            return out
        with contextlib.suppress(RuntimeError, ValueError):  # outputs too unlike to measure
            cmp.anchor = compare.against_anchor(anchor, ref_out, cand_out, self.rule, compare.Comparison(True),
                                                tolerances=tol if mode == "reference" else None).anchor
        return cmp

    def evidence(self) -> precision.Evidence:
        """What decides how far from float64 the design may be (`precision.evidence`)."""
        if self.evidence_override is not None:
            return self.evidence_override
        return precision.evidence(self.precision, self.design_precision)

    def _note_ref_errors(self, cmp: compare.Comparison) -> None:
        for i, a in enumerate(cmp.anchor or ()):
            if i < len(self.ref_errors):
                self.ref_errors[i] = max(self.ref_errors[i], float(a["reference"]))
            else:
                self.ref_errors.append(float(a["reference"]))

    def tolerances(self) -> Mapping[str, Mapping[str, float]]:
        """Tolerances for comparisons against eager after correctness (integrity, shapes): the
        fixed ones, widened where the anchor decided a trial (`_calibrated_atol`)."""
        if self._calibrated_atol is not None:
            base = self.req["tolerances"] if self.mode() == "reference" else {}
            return {k: {"atol": self._calibrated_atol,
                        "rtol": float((base.get(k) or base.get("float32") or {}).get("rtol", 0.0))}
                    for k in ("float16", "bfloat16", "float32", "float64")}
        return self.req["tolerances"]

    def loaded(self, need_candidate: bool) -> Programs:
        if self.programs is None or (need_candidate and self.programs.candidate is None):
            raise StageFailure("harness_error", "stage ran without a loaded program")
        return self.programs

    def make_inputs(self, p: Programs, seed: int) -> list[Any]:
        try:
            return runtime.make_inputs(p.reference_module, seed, self.device)
        except Exception as e:
            raise StageFailure(runtime.problem_kind(e), f"get_inputs() failed: {runtime.one_line(e)}",
                               {"traceback": runtime.format_exception(e)}) from e

    def call_reference(self, model: torch.nn.Module, inputs: list[Any]) -> Any:
        try:
            out = model(*inputs)
            runtime.synchronize(self.device)
            return out
        except Exception as e:
            self.note_cuda(e)
            raise StageFailure(runtime.problem_kind(e), f"the reference Model raised: {runtime.one_line(e)}",
                               {"traceback": runtime.format_exception(e)}) from e

    def note_cuda(self, e: BaseException) -> None:
        if runtime.classify_exception(e) == "cuda_error":
            self.poisoned = runtime.one_line(e)


def freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def unpack(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The envelope (`EvalRequest`) as the stages read it: its payload's fields at the top,
    and the design's `candidate.py` as `candidate` (None for a reference-only request)."""
    if "payload" not in envelope:  # already unpacked
        return dict(envelope)
    out = {k: v for k, v in envelope.items() if k not in ("payload", "files")}
    out.update(envelope["payload"] or {})
    files = envelope.get("files") or {}
    out["candidate"] = {"filename": "candidate.py", "source": files["candidate.py"]} if "candidate.py" in files else None
    return out


def device_request(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """The request unpacked (`unpack`), with its device made explicit (`cuda` -> `cuda:0`: the
    slot pins one GPU with CUDA_VISIBLE_DEVICES), that device made current.

    Raises:
        RuntimeError: the request asks for a GPU and torch sees none.
    """
    request = unpack(request)
    device = str(request["device"])
    if device == "cuda":
        device = "cuda:0"
        request = {**request, "device": device}
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("the request asks for a CUDA device but torch sees no GPU")
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        runtime.cap_memory(device, request.get("gpu_memory_fraction"))
    else:  # one thread count for every program timed on the CPU ([pytorch] cpu_threads)
        torch.set_num_threads(int(request.get("cpu_threads") or 1))
    return request
