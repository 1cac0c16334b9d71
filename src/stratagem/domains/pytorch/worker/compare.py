"""Owns comparing a candidate's output with the reference's: structure, then values.

Worker-side only. Structure first (type, device, dtype, shape, nesting), then values: with the
tolerance of the reference output's dtype (`compare_outputs`, the fixed rule), against a
float64 run of the reference within a factor of eager's own error (`calibrated_compare`), or
both (`reference_compare`: the fixed rule, and where it fails, float64 with the tolerance as
the margin); max absolute and relative errors are reported, and the verdicts of the
benchmarks' own rules (`benchmark_verdicts`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

REL_FLOOR = 1e-3
"""Relative errors are reported against max(|expected|, REL_FLOOR x the output's largest
finite magnitude): an element near zero counts at the output's scale, so one tiny expected
value cannot make the reported relative error 1e35 (the tolerance test itself is unchanged)."""
CHUNK_ELEMENTS = 1 << 26
"""Elements compared at a time, bounding the temporaries (~0.25 GiB each in float32)."""
CPU_QUICK_CHUNK = 1 << 18
"""Elements per pass of the quick check on the CPU: temporaries of 1 MiB stay in cache, which
makes the check of a 128 MiB float32 output 3.5x faster than one 64M-element pass (0.06 s
against 0.21 s on a 2-core machine); on a GPU the large chunk keeps the kernel launches few."""


def chunks(t: torch.Tensor, elements: int | None = None) -> list[torch.Tensor]:
    """Views of `t` of about `elements` (default CHUNK_ELEMENTS) each that together cover it,
    with no copy of the whole (a contiguous tensor's flat slices, else slices along its first
    dimension)."""
    elements = elements or CHUNK_ELEMENTS
    if t.dim() == 0 or t.numel() <= elements:
        return [t]
    if t.is_contiguous():
        flat = t.view(-1)
        return [flat[lo : lo + elements] for lo in range(0, flat.numel(), elements)]
    return list(t.split(max(1, elements // max(1, t[0].numel())), dim=0))


@dataclass
class Comparison:
    ok: bool
    reason: str | None = None
    kind: str = "wrong_output"
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    mismatched: int = 0
    checked: int = 0
    anchor: list[dict[str, float]] | None = None
    """Per floating output, errors against the float64 anchor (`candidate`, `reference`,
    `limit`, `magnitude`), when an anchor was computed."""
    decided_by: str = "fixed"
    """The rule that decided: `fixed` (against eager), `reference` (against float64, after
    the fixed check failed), `precision` (a precision downgrade) or `calibrated`."""
    allowance: bool = False
    """Passed only within the error the reference's precision predicts (`same_precision_factor`
    x its own), which the evidence that the design computed at that precision admits."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok,
            "reason": self.reason,
            "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err,
            "mismatched": self.mismatched,
            "checked": self.checked,
            "decided_by": self.decided_by,
        }
        if self.anchor is not None:
            out["anchor"] = self.anchor
        if self.allowance:
            out["allowance"] = True
        return out


def _tol(tolerances: Mapping[str, Mapping[str, float]], dtype: torch.dtype) -> tuple[float, float]:
    key = str(dtype).removeprefix("torch.")
    t = tolerances.get(key) or tolerances.get("float32") or {"atol": 1e-4, "rtol": 1e-4}
    return float(t["atol"]), float(t["rtol"])


def compare_outputs(
    ref: Any, new: Any, tolerances: Mapping[str, Mapping[str, float]], where: str = "output"
) -> Comparison:
    """Compare recursively; the first structural mismatch or value mismatch decides."""
    if isinstance(ref, torch.Tensor):
        return _compare_tensor(ref, new, tolerances, where)
    if isinstance(ref, Sequence) and not isinstance(ref, str | bytes):
        if not isinstance(new, Sequence) or isinstance(new, str | bytes):
            return Comparison(False, f"{where}: expected a sequence, got {type(new).__name__}", "malformed")
        if len(ref) != len(new):
            return Comparison(False, f"{where}: expected {len(ref)} items, got {len(new)}", "malformed")
        total = Comparison(True)
        for i, (r, n) in enumerate(zip(ref, new, strict=True)):
            c = compare_outputs(r, n, tolerances, f"{where}[{i}]")
            if not c.ok:
                return c
            total.max_abs_err = max(total.max_abs_err, c.max_abs_err)
            total.max_rel_err = max(total.max_rel_err, c.max_rel_err)
            total.checked += c.checked
        return total
    if isinstance(ref, bool | int | float):
        if type(new) is not type(ref):
            return Comparison(False, f"{where}: expected {type(ref).__name__}, got {type(new).__name__}", "malformed")
        if ref != new and not (isinstance(ref, float) and abs(ref - new) <= 1e-6 * max(1.0, abs(ref))):
            return Comparison(False, f"{where}: expected {ref!r}, got {new!r}")
        return Comparison(True, checked=1)
    if ref is None:
        ok = new is None
        return Comparison(ok, None if ok else f"{where}: expected None, got {type(new).__name__}", "malformed")
    return Comparison(False, f"{where}: cannot compare outputs of type {type(ref).__name__}", "malformed")


def _compare_tensor(
    ref: torch.Tensor, new: Any, tolerances: Mapping[str, Mapping[str, float]], where: str
) -> Comparison:
    mismatch = _structure(ref, new, where)
    if mismatch is not None:
        return mismatch
    n = ref.numel()
    if n == 0:
        return Comparison(True)
    if not ref.is_floating_point() and not ref.is_complex():
        mism = int((ref != new).sum().item())
        ok = mism == 0
        return Comparison(ok, None if ok else f"{where}: {mism} of {n} elements differ", mismatched=mism, checked=n)
    atol, rtol = _tol(tolerances, ref.dtype)
    flat_r, flat_c = ref.detach().reshape(-1), new.detach().reshape(-1)
    # float32 arithmetic is exact enough to judge fp32 tolerances (its rounding is ~1e-7
    # relative, three orders under 1e-4); float64 stays float64; half types are upcast.
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    quick = _all_within(flat_r, flat_c, atol, rtol, work, n)
    if quick is not None:
        return quick
    floor = rel_floor(flat_r, work)
    zero = torch.zeros((), dtype=torch.float64, device=ref.device)
    mism = nan_mism = inf_mism = torch.zeros((), dtype=torch.int64, device=ref.device)
    max_abs, max_rel = zero.clone(), zero.clone()
    first_bad: int | None = None
    for lo in range(0, n, CHUNK_ELEMENTS):
        r = flat_r[lo : lo + CHUNK_ELEMENTS].to(work)
        c = flat_c[lo : lo + CHUNK_ELEMENTS].to(work)
        nan_r, nan_c = torch.isnan(r), torch.isnan(c)
        nan_mism = nan_mism + (nan_r != nan_c).sum()
        finite = torch.isfinite(r) & torch.isfinite(c)
        inf_mism = inf_mism + (~finite & ~(nan_r | nan_c) & (r != c)).sum()
        diff = torch.where(finite, (r - c).abs(), 0.0)
        bad = diff > (atol + rtol * r.abs())
        mism = mism + bad.sum()
        max_abs = torch.maximum(max_abs, diff.max().to(torch.float64))
        rel = torch.where(diff == 0, 0.0, diff / r.abs().clamp_min(floor))
        max_rel = torch.maximum(max_rel, rel.max().to(torch.float64))
        if first_bad is None and n > CHUNK_ELEMENTS and bool(bad.any()):
            first_bad = lo + int(bad.nonzero()[0].item())
    counts = torch.stack([mism, nan_mism, inf_mism]).tolist()  # one synchronization
    cmp = Comparison(True, checked=n, max_abs_err=float(max_abs), max_rel_err=float(max_rel))
    cmp.mismatched = int(sum(counts))
    nan_mismatch, inf_mismatch = int(counts[1]), int(counts[2])
    if cmp.mismatched:
        cmp.ok = False
        parts = [
            f"{where}: {cmp.mismatched} of {n} elements outside atol={atol:g}, rtol={rtol:g}",
            f"max abs err {cmp.max_abs_err:.3g}, max rel err {cmp.max_rel_err:.3g}",
        ]
        if nan_mismatch:
            parts.append(f"{nan_mismatch} NaN positions differ")
        if inf_mismatch:
            parts.append(f"{inf_mismatch} infinities differ")
        if first_bad is None:
            bad_all = (flat_r.to(work) - flat_c.to(work)).abs() > (atol + rtol * flat_r.to(work).abs())
            hits = bad_all.nonzero()
            first_bad = int(hits[0].item()) if hits.numel() else None
        if first_bad is not None:
            pos = _unravel(first_bad, tuple(ref.shape))
            parts.append(f"first at {pos}: expected {float(flat_r[first_bad]):.6g}, got {float(flat_c[first_bad]):.6g}")
        cmp.reason = "; ".join(parts)
    return cmp


def _structure(ref: torch.Tensor, new: Any, where: str) -> Comparison | None:
    """The failed comparison when `new` is not a plain dense tensor like `ref`, else None."""
    if type(new) is not torch.Tensor:
        return Comparison(
            False, f"{where}: expected a plain torch.Tensor, got {type(new).__module__}.{type(new).__qualname__}",
            "malformed",
        )
    if new.device != ref.device:
        return Comparison(False, f"{where}: on device {new.device}, expected {ref.device}", "malformed")
    if new.dtype != ref.dtype:
        return Comparison(False, f"{where}: dtype {new.dtype}, expected {ref.dtype}", "malformed")
    if new.shape != ref.shape:
        return Comparison(False, f"{where}: shape {tuple(new.shape)}, expected {tuple(ref.shape)}", "malformed")
    if new.layout != torch.strided:
        return Comparison(False, f"{where}: layout {new.layout}, expected a dense tensor", "malformed")
    return None


def _all_within(flat_r: torch.Tensor, flat_c: torch.Tensor, atol: float, rtol: float, work: torch.dtype,
                n: int) -> Comparison | None:
    """The common case in a few passes: every element finite and within tolerance (a NaN or an
    infinity anywhere fails `diff <= limit`, so those, and every mismatch, go to the full
    count). Returns the passing comparison, or None when the full count must decide."""
    max_abs = max_rel = 0.0
    floor = rel_floor(flat_r, work)
    unbounded = math.isinf(atol) or math.isinf(rtol)  # structure only: any finite difference
    chunk = CPU_QUICK_CHUNK if flat_r.device.type == "cpu" else CHUNK_ELEMENTS
    for lo in range(0, n, chunk):
        r = flat_r[lo : lo + chunk].to(work)
        diff = flat_c[lo : lo + chunk].to(work).sub(r).abs_()
        mag = r.abs()
        within = (bool(torch.isfinite(diff).all()) if unbounded
                  else bool(diff.le(mag.mul(rtol).add_(atol)).all()))
        if not within:
            return None
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float(diff.div_(mag.clamp_min_(floor)).max()))
    return Comparison(True, checked=n, max_abs_err=max_abs, max_rel_err=max_rel)


def rel_floor(flat: torch.Tensor, work: torch.dtype) -> float:
    """The smallest denominator of a reported relative error: REL_FLOOR x the largest finite
    magnitude of `flat` (chunked), and never under the dtype's smallest normal number."""
    tiny = torch.finfo(work).tiny
    chunk = CPU_QUICK_CHUNK * 16 if flat.device.type == "cpu" else CHUNK_ELEMENTS
    top = torch.zeros((), dtype=work, device=flat.device)
    for lo in range(0, flat.numel(), chunk):
        a = flat[lo : lo + chunk].to(work).abs()
        top = torch.maximum(top, torch.where(torch.isfinite(a), a, 0.0).max())
    return max(tiny, REL_FLOOR * float(top))


def _unravel(index: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for dim in reversed(shape):
        out.append(index % dim)
        index //= dim
    return list(reversed(out))


def inputs_unchanged(before: Sequence[Any], after: Sequence[Any]) -> str | None:
    """None if every tensor input is bit-identical to its pristine copy, else which changed."""
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
                return f"input {i} was replaced or reshaped"
            if not torch.equal(_bits(a), _bits(b)):
                return f"input {i} was modified in place"
    return None


_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A view of the tensor's bits, so NaNs compare equal to themselves."""
    if t.is_floating_point() and t.element_size() in _INT_VIEW:
        return t.contiguous().view(_INT_VIEW[t.element_size()])
    return t


# -- the calibrated rule ------------------------------------------------------------------

_ANY = {"atol": float("inf"), "rtol": float("inf")}


@dataclass
class AnchorErrors:
    """One output tensor's errors against the float64 anchor (max abs, in the output's units)."""

    candidate: float
    reference: float
    limit: float
    """The absolute part of the limit: factor x `reference` + the floor (+ the tolerance's atol
    under the reference rule)."""
    magnitude: float
    """The anchor's largest finite magnitude."""
    rtol: float = 0.0
    """The relative part of the limit, per element (x |anchor|): the tolerance's rtol under the
    reference rule, 0 under the calibrated one."""
    outside: int = 0
    """Elements over the limit."""


def anchor_errors(anchor: torch.Tensor, out: torch.Tensor) -> tuple[float, float]:
    """(max |out - anchor| over finite elements, max |anchor|), in float64, chunked."""
    a, o = anchor.detach().reshape(-1), out.detach().reshape(-1)
    err = torch.zeros((), dtype=torch.float64, device=a.device)
    mag = torch.zeros((), dtype=torch.float64, device=a.device)
    for lo in range(0, a.numel(), CHUNK_ELEMENTS):
        x = a[lo : lo + CHUNK_ELEMENTS].to(torch.float64)
        y = o[lo : lo + CHUNK_ELEMENTS].to(torch.float64)
        d = (x - y).abs_()
        e = d.max()  # NaN propagates: finite only when x and y are finite everywhere here
        if bool(torch.isfinite(e)):
            err, mag = torch.maximum(err, e), torch.maximum(mag, x.abs().max())
            continue
        fin = torch.isfinite(x) & torch.isfinite(y)
        err = torch.maximum(err, torch.where(fin, d, 0.0).max())
        mag = torch.maximum(mag, torch.where(torch.isfinite(x), x.abs(), 0.0).max())
    e, m = torch.stack([err, mag]).tolist()
    return float(e), float(m)


def _leaves(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, Sequence) and not isinstance(x, str | bytes):
        return [t for item in x for t in _leaves(item)]
    return []


def calibrated_compare(anchor: Any, ref: Any, new: Any, rule: Mapping[str, Any], where: str = "output") -> Comparison:
    """The calibrated rule: structure, dtypes and NaN/inf positions as against the reference;
    then each floating output's max error against the float64 `anchor` must be at most
    `factor` x the eager reference's own, plus the floor (`atol_floor` + `ulp_floor` ulps of
    the output dtype at the anchor's largest magnitude). `details` of the result: `anchor`."""
    structure = compare_outputs(ref, new, {k: _ANY for k in ("float16", "bfloat16", "float32", "float64")}, where)
    if not structure.ok:
        return structure
    total = Comparison(True, checked=structure.checked, max_abs_err=structure.max_abs_err,
                       max_rel_err=structure.max_rel_err, decided_by="calibrated")
    return against_anchor(anchor, ref, new, rule, total, where)


def _over_limit(anchor: torch.Tensor, out: torch.Tensor, slack: float, rtol: float) -> int:
    """Finite elements with |out - anchor| > slack + rtol |anchor| (chunked)."""
    a, o = anchor.detach().reshape(-1), out.detach().reshape(-1)
    over = torch.zeros((), dtype=torch.int64, device=a.device)
    for lo in range(0, a.numel(), CHUNK_ELEMENTS):
        x = a[lo : lo + CHUNK_ELEMENTS].to(torch.float64)
        d = (x - o[lo : lo + CHUNK_ELEMENTS].to(torch.float64)).abs_()
        over = over + (torch.isfinite(d) & (d > x.abs().mul_(rtol).add_(slack))).sum()  # x may be the anchor itself
    return int(over.item())


def against_anchor(anchor: Any, ref: Any, new: Any, rule: Mapping[str, Any], total: Comparison,
                   where: str = "output", tolerances: Mapping[str, Mapping[str, float]] | None = None,
                   ref_errors: Sequence[float] = ()) -> Comparison:
    """The value check against the anchor on outputs whose structure already matched: `total`
    with the errors against the anchor added (`anchor`), failed when an element is over its
    limit, factor x eager's max error against the anchor + the floor (`atol_floor` +
    `ulp_floor` ulps of the output dtype at the anchor's largest magnitude), + with
    `tolerances` (the reference rule) the dtype's atol + rtol x |anchor|. Eager's error is the
    largest of this call's and `ref_errors` (per floating output, from earlier trials: the
    reference's own error across trials and seeds)."""
    factor, floor_abs, ulps = float(rule.get("factor") or 4.0), float(rule.get("atol_floor", 0.0)), float(rule.get("ulp_floor", 2.0))
    per: list[AnchorErrors] = []
    leaves = _leaves(ref)
    for i, (a, r, c) in enumerate(zip(_leaves(anchor), leaves, _leaves(new), strict=True)):
        if not r.is_floating_point() or r.numel() == 0:
            continue
        e_ref, mag = anchor_errors(a, r)
        e_cand, _ = anchor_errors(a, c)
        atol, rtol = _tol(tolerances, r.dtype) if tolerances is not None else (0.0, 0.0)
        seen = max(e_ref, ref_errors[len(per)] if len(per) < len(ref_errors) else 0.0)
        limit = factor * seen + floor_abs + ulps * torch.finfo(r.dtype).eps * mag + atol
        outside = int(e_cand > limit) if rtol == 0 else (_over_limit(a, c, limit, rtol) if e_cand > limit else 0)
        per.append(AnchorErrors(e_cand, e_ref, limit, mag, rtol, outside))
        if outside:
            name = where if len(leaves) == 1 else f"{where}[{i}]"
            total.ok = False
            ratio = f"{e_cand / seen:.3g}x" if seen > 0 else "infinitely"
            own = f"{seen:.3g}" + (" (its largest across trials)" if seen > e_ref else "")
            if tolerances is None:
                total.reason = (f"{name}: max error against the float64 reference {e_cand:.3g} is {ratio} eager's own "
                                f"{own}, over the limit {limit:.3g} ({factor:g}x eager's error + floor)")
            else:
                total.reason = (f"{name}: {outside} of {r.numel()} elements further from the float64 result than "
                                f"{factor:g}x the reference's own max error ({own}) + atol={atol:g} + "
                                f"rtol={rtol:g} x |float64|; the candidate's max error against float64 is "
                                f"{e_cand:.3g}, {ratio} the reference's")
            break
    total.anchor = [vars(p) for p in per]
    return total


def reference_compare(anchor: Any, ref: Any, new: Any, rule: Mapping[str, Any],
                      tolerances: Mapping[str, Mapping[str, float]], fixed: Comparison,
                      where: str = "output", seen: bool = False, ref_errors: Sequence[float] = ()) -> Comparison:
    """The reference rule's second look, for outputs that failed the fixed rule (`fixed`)
    against eager: the candidate passes when its max error against float64 is within factor
    (1.5) x eager's own + the floor (`against_anchor`), or, when its precision was `seen` at
    the reference's or higher, within the error that precision predicts:
    `same_precision_factor` (3) x eager's own (the result is marked `allowance`). Another
    algorithm at the same precision rounds differently (on an H100, honest TF32 designs of
    KernelBench's ResNet block came 1.57-1.78x eager's error; a lower precision is rejected
    by what ran, not by its error: `precision.downgrade`). Structure and NaN/infinity
    positions are checked as by the calibrated rule."""
    structure = compare_outputs(ref, new, {k: _ANY for k in ("float16", "bfloat16", "float32", "float64")}, where)
    if not structure.ok:
        return structure

    def look(factor: float) -> Comparison:
        total = Comparison(True, checked=structure.checked, max_abs_err=fixed.max_abs_err,
                           max_rel_err=fixed.max_rel_err, decided_by="reference")
        return against_anchor(anchor, ref, new, {**rule, "factor": factor}, total, where, ref_errors=ref_errors)

    out = look(float(rule.get("factor") or 1.5))
    wide = float(rule.get("same_precision_factor") or 3.0)
    if not out.ok and seen and wide > float(rule.get("factor") or 1.5):
        out = look(wide)
        out.allowance = out.ok
    if not out.ok:
        out.reason = f"{fixed.reason}; against float64: {out.reason}"
    return out


BENCHMARK_RULES: dict[str, dict[str, dict[str, float]]] = {
    "kernelbench": {"float32": {"atol": 1e-4, "rtol": 1e-4}, "float16": {"atol": 1e-2, "rtol": 1e-2},
                    "bfloat16": {"atol": 1e-2, "rtol": 1e-2}, "float64": {"atol": 1e-4, "rtol": 1e-4}},
    "pike": {d: {"atol": 1e-2, "rtol": 1e-2} for d in ("float32", "float16", "bfloat16", "float64")},
}
"""The benchmarks' own rules, elementwise against eager as `torch.allclose`: KernelBench at
HEAD (fp32 1e-4, fp16/bf16 1e-2, TorchBench's values), PIKE's evaluator (1e-2)."""


def _within(loose: Mapping[str, Mapping[str, float]], tight: Mapping[str, Mapping[str, float]]) -> bool:
    """Whether every dtype's tolerance in `loose` is at least `tight`'s."""
    return all(v["atol"] >= _tol(tight, _DTYPES[k])[0] and v["rtol"] >= _tol(tight, _DTYPES[k])[1]
               for k, v in loose.items())


_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def benchmark_verdicts(ref: Any, new: Any, passed_under: Mapping[str, Mapping[str, float]] | None) -> dict[str, bool]:
    """Each benchmark rule's verdict on one call (`BENCHMARK_RULES`); `passed_under`: the
    tolerances the outputs already passed against eager (a looser rule then passes without
    another look), or None."""
    return {name: (passed_under is not None and _within(tol, passed_under)) or compare_outputs(ref, new, tol).ok
            for name, tol in BENCHMARK_RULES.items()}
