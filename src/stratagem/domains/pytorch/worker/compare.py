"""Owns comparing a candidate's output with the reference's: structure, then values.

Worker-side only. Structure first (type, device, dtype, shape, nesting), then values: with the
tolerance of the reference output's dtype (`compare_outputs`, the fixed rule), or against a
float64 run of the reference within a factor of eager's own error (`calibrated_compare`);
max absolute and relative errors are reported.
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

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok,
            "reason": self.reason,
            "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err,
            "mismatched": self.mismatched,
            "checked": self.checked,
        }
        if self.anchor is not None:
            out["anchor"] = self.anchor
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
    magnitude: float
    """The anchor's largest finite magnitude."""


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
                       max_rel_err=structure.max_rel_err)
    return against_anchor(anchor, ref, new, rule, total, where)


def against_anchor(anchor: Any, ref: Any, new: Any, rule: Mapping[str, Any], total: Comparison,
                   where: str = "output") -> Comparison:
    """The calibrated rule's value check on outputs whose structure already matched: `total`
    with the errors against the anchor added (`anchor`), failed when one is over its limit."""
    factor, floor_abs, ulps = float(rule.get("factor", 4.0)), float(rule.get("atol_floor", 0.0)), float(rule.get("ulp_floor", 2.0))
    per: list[AnchorErrors] = []
    for i, (a, r, c) in enumerate(zip(_leaves(anchor), _leaves(ref), _leaves(new), strict=True)):
        if not r.is_floating_point() or r.numel() == 0:
            continue
        e_ref, mag = anchor_errors(a, r)
        e_cand, _ = anchor_errors(a, c)
        limit = factor * e_ref + floor_abs + ulps * torch.finfo(r.dtype).eps * mag
        per.append(AnchorErrors(e_cand, e_ref, limit, mag))
        if e_cand > limit:
            name = where if len(_leaves(ref)) == 1 else f"{where}[{i}]"
            total.ok = False
            ratio = f"{e_cand / e_ref:.3g}x" if e_ref > 0 else "infinitely"
            total.reason = (f"{name}: max error against the float64 reference {e_cand:.3g} is {ratio} eager's own "
                            f"{e_ref:.3g}, over the calibrated limit {limit:.3g} ({factor:g}x eager's error + floor)")
            break
    total.anchor = [vars(p) for p in per]
    return total
