"""Owns the randomised-parameters trial: the reference and the candidate run with the same
random, non-initial parameters and buffers, so code that relies on initial values (a layer
norm that skips its affine transform because its weights start at ones and zeros) fails.

Worker-side only. The random state is drawn for the reference's `state_dict()` (floating
tensors only: each becomes `value * U(0.5, 1.5) + N(0, spread)`, with `spread` its own standard
deviation or 0.1 when it is constant; buffers named like variances stay positive). It is
loaded into a copy of the reference and mapped onto the candidate:

1. the same keys and shapes: key by key;
2. else the same number of floating tensors with the same shapes in the same order: in order;
3. else every shape unique on both sides: by shape.

When none applies, the trial is skipped and the details say why; nothing fails silently. The
candidate's own state is restored afterwards.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import compare, record, runtime
from stratagem.worker_api.stages import StageFailure

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import ReferenceContext, StageContext


def randomised_state(reference: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """A random, non-initial value for every floating tensor of the reference's state, drawn
    on the tensor's own device (the worker and the judge run on the same device, so they draw
    the same values; nothing of the state is copied to the host)."""
    gens: dict[torch.device, torch.Generator] = {}
    out: dict[str, torch.Tensor] = {}
    for name, t in reference.state_dict().items():
        if not t.is_floating_point() or t.numel() == 0:
            continue
        gen = gens.get(t.device)
        if gen is None:
            gen = gens[t.device] = torch.Generator(device=t.device).manual_seed(seed)
        work = torch.float64 if t.dtype == torch.float64 else torch.float32
        x = t.detach().to(work)
        std = float(x.std()) if x.numel() > 1 else 0.0
        spread = std if std > 0 and math.isfinite(std) else 0.1
        new = torch.rand(x.shape, generator=gen, dtype=work, device=t.device).add_(0.5).mul_(x)
        new.add_(torch.randn(x.shape, generator=gen, dtype=work, device=t.device), alpha=spread)
        if "var" in name.rsplit(".", 1)[-1]:
            new = new.abs_().add_(0.5 * spread + 1e-3)
        out[name] = new.to(t.dtype)
    return out


def mapping(ref_state: Mapping[str, torch.Tensor], cand: torch.nn.Module) -> tuple[dict[str, str], str]:
    """candidate key -> reference key, and how it was found ('' and a reason when it cannot be)."""
    cand_state: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for k, v in cand.state_dict().items():  # a tensor reachable twice (a compiled wrapper) once
        ident = (v.data_ptr(), v.numel())
        if v.is_floating_point() and v.numel() > 0 and ident not in seen:
            seen.add(ident)
            cand_state[k] = v
    shapes_r = {k: tuple(v.shape) for k, v in ref_state.items()}
    shapes_c = {k: tuple(v.shape) for k, v in cand_state.items()}
    if not shapes_r:
        return {}, "the reference has no floating parameters or buffers"
    if shapes_c == shapes_r:
        return {k: k for k in shapes_c}, "by key"
    if list(shapes_c.values()) == list(shapes_r.values()):
        return dict(zip(shapes_c, shapes_r, strict=True)), "in order (same shapes, other names)"
    if (len(set(shapes_c.values())) == len(shapes_c) and len(set(shapes_r.values())) == len(shapes_r)
            and set(shapes_c.values()) == set(shapes_r.values())):
        by_shape = {s: k for k, s in shapes_r.items()}
        return {k: by_shape[s] for k, s in shapes_c.items()}, "by shape (every shape unique)"
    return {}, (f"the candidate's state ({len(shapes_c)} floating tensors) does not map onto the reference's "
                f"({len(shapes_r)}): not by key, by order or by unique shapes")


@contextlib.contextmanager
def randomised(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> Iterator[torch.nn.Module]:
    """`model` itself holding `state` (its floating tensors overwritten in place) while inside,
    its own values restored after. In place, not on a copy: a deep copy keeps whatever the
    model's closures captured pointing at the original (KernelBench's MiniGPTBlock calls its
    MLP through a lambda over `self.mlp`), so a copied reference computed part of its output
    with the initial weights and failed an honest candidate; and a copy of a large model costs
    its size again."""
    live = model.state_dict()
    saved = {k: live[k].detach().clone() for k in state if k in live}
    try:
        with torch.no_grad():
            for k, v in state.items():
                if k in live:
                    live[k].copy_(v)
        yield model
    finally:
        with torch.no_grad():
            for k, v in saved.items():
                live[k].copy_(v)


def judge_randomised(w: ReferenceContext, ref: torch.nn.Module, ref_out: Any, cand_out: Any, inputs: list[Any]) -> Any:
    """Compare by worker `w`'s rule, with the anchor of the randomised reference `ref` (where it
    can decide: the calibrated and reference rules; it runs only when the rule asks)."""
    anchor_ref = w.anchor
    anchored = w.mode() in ("calibrated", "reference")
    w.anchor = type(anchor_ref)(ref, w.device) if anchor_ref is not None and anchored else None
    try:
        return w.judge(ref_out, cand_out, inputs, report_anchor=False)
    finally:
        w.anchor = anchor_ref


def run_trial(w: StageContext, seed: int) -> dict[str, Any]:
    """The randomised-parameters trial for worker `w`; raises StageFailure when the outputs
    disagree, returns the details (or why it was skipped), with its seconds."""
    t0 = time.perf_counter()
    out = _run_trial(w, seed)
    out["randomised_parameters"]["duration_s"] = time.perf_counter() - t0
    return out


def _run_trial(w: StageContext, seed: int) -> dict[str, Any]:
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None
    cand = p.candidate
    state = randomised_state(p.reference, seed)
    if not state:
        return {"randomised_parameters": {"skipped": "the reference has no floating parameters or buffers"}}
    pairs, how = mapping(state, cand)
    if not pairs:
        return {"randomised_parameters": {"skipped": how}}
    with torch.no_grad():
        inputs = w.make_inputs(p, seed)
        with randomised(cand, {ck: state[rk] for ck, rk in pairs.items()}):
            cand_out = w.call_candidate(cand, runtime.clone_inputs(inputs))
        w.recorder.save(record.params_key(seed), cand_out)
        with randomised(p.reference, state) as ref:
            ref_out = w.call_reference(ref, runtime.clone_inputs(inputs))
            cmp = judge_randomised(w, ref, ref_out, cand_out, inputs)
    info = {"mapped": how, "tensors": len(pairs), "seed": seed, **cmp.to_json()}
    if not cmp.ok:
        raise StageFailure(cmp.kind, f"with randomised parameters (mapped {how}): {cmp.reason}",
                           {"randomised_parameters": info})
    return {"randomised_parameters": info}


OFF_SCALE = 16.0
"""Default factor of the off-distribution trial above the visible inputs (a problem may name its
own: `input_scale`)."""

OFF_DOWN = 1e-3
"""Factor of the off-distribution trial below the visible inputs: what matters only at small
magnitudes (an `eps`, a threshold, a flush to zero) is exact at the visible scale and at a
larger one; a red-team attacker's RMSNorm without its eps passed every trial above it (its
error 1e-6 relative at scale 1 and 16, 25% at 1e-3)."""


OFF_CHUNK = 1 << 24
"""Elements drawn at a time by the off-distribution trial (bounds its temporaries)."""


def off_distribution(inputs: list[Any], scale: float, seed: int) -> list[Any]:
    """The inputs scaled by `scale` plus a heavy-tailed sample (Student's t with 2 degrees of
    freedom, times `scale`/4), clipped to a range safe for the dtype; non-floating inputs kept.
    Drawn on the inputs' device, chunk by chunk into one new tensor per input: nothing
    crosses to the host, and the temporaries stay at a few OFF_CHUNK-element buffers
    whatever the input's size."""
    gens: dict[torch.device, torch.Generator] = {}
    out: list[Any] = []
    for x in inputs:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            out.append(x)
            continue
        gen = gens.get(x.device)
        if gen is None:
            gen = gens[x.device] = torch.Generator(device=x.device).manual_seed(seed)
        work = torch.float64 if x.dtype == torch.float64 else torch.float32  # ample for a sample
        bound = min(1e4, float(torch.finfo(x.dtype).max) ** 0.25)
        src = x.detach().contiguous().reshape(-1)
        y = torch.empty(src.shape, dtype=x.dtype, device=x.device)
        for lo in range(0, src.numel(), OFF_CHUNK):
            n = min(OFF_CHUNK, src.numel() - lo)
            z = torch.randn(n, generator=gen, dtype=work, device=x.device)
            chi = torch.randn(n, generator=gen, dtype=work, device=x.device).square_()
            chi.add_(torch.randn(n, generator=gen, dtype=work, device=x.device).square_()).div_(2)
            tail = z.div_(chi.sqrt_().clamp_min_(1e-3))
            y[lo:lo + n] = tail.mul_(scale / 4).add_(src[lo:lo + n].to(work), alpha=scale).clamp_(-bound, bound)
        out.append(y.reshape(x.shape))
    return out


def _floating(out: Any) -> list[torch.Tensor]:
    ts = [out] if isinstance(out, torch.Tensor) else [t for t in (out if isinstance(out, list | tuple) else [])
                                                     if isinstance(t, torch.Tensor)]
    return [t.detach() for t in ts if t.is_floating_point() and t.numel()]


def output_magnitude(out: Any) -> float:
    """The largest finite magnitude among the floating outputs (in chunks: no temporary the
    size of an output, which at KernelBench's sizes is memory the evaluation's plan lacks)."""
    vals = [float(torch.stack([c.abs().nan_to_num(0, 0, 0).max() for c in compare.chunks(t)]).max())
            for t in _floating(out)]
    return max(vals, default=0.0)


def finite(out: Any) -> bool:
    """Whether every floating output is finite (in chunks, as `output_magnitude`)."""
    return all(bool(torch.isfinite(c).all()) for t in _floating(out) for c in compare.chunks(t))


def off_scales(setting: Any) -> tuple[float, ...]:
    """The off-distribution trials' input scales for a request's `off_distribution` setting:
    one above the visible inputs (the problem's own or OFF_SCALE) and OFF_DOWN below; none
    when the problem opts out."""
    if setting is False:
        return ()
    up = float(setting) if isinstance(setting, int | float) and not isinstance(setting, bool) else OFF_SCALE
    return (up, OFF_DOWN)


def off_distribution_inputs(w: ReferenceContext, seed: int, scale: float) -> list[Any]:
    return off_distribution(w.make_inputs(w.loaded(need_candidate=False), seed), scale, seed)


OFF_REL = 1e-2
"""The off-distribution trial's absolute tolerance, as a fraction of the reference output's
largest magnitude there."""


def judge_off_distribution(w: ReferenceContext, ref_out: Any, cand_out: Any, inputs: list[Any], visible_magnitude: float) -> tuple[Any, float]:
    """The comparison of the off-distribution trial, the same in both correctness modes: the
    fixed rule's relative tolerance, and an absolute one of OFF_REL x the reference output's
    largest magnitude there. Scaled inputs grow the rounding of intermediate values (a
    matmul's products by the scale squared) faster than any per-element tolerance follows,
    and honest code summing in another order differs from eager by far more than 1e-4 there
    (a fused matmul on the 04 example: 7e-4 of the output's magnitude, 200x eager's own error
    against float64); what this trial is for, code that ignores part of the computation
    outside the visible range (a clamp never reached, an approximation valid only near 0), is
    off by a large fraction of the output. Returns the comparison and the output's growth
    over the visible trials' (reported)."""
    mag = output_magnitude(ref_out)
    grow = max(1.0, mag / visible_magnitude) if visible_magnitude > 0 else 1.0
    tol = {k: {"atol": max(float(v["atol"]), OFF_REL * mag), "rtol": float(v["rtol"])}
           for k, v in w.req["tolerances"].items()}
    return compare.compare_outputs(ref_out, cand_out, tol), grow


def run_off_distribution(w: StageContext, seed: int, visible_magnitude: float) -> dict[str, Any]:
    """The trials on inputs off `get_inputs()`'s distribution, above and below its scale
    (`judge_off_distribution`); a reference that is not finite there, or a problem that opts
    out (`STRATAGEM = {"off_distribution": False}`), skips them with a note. With seconds."""
    t0 = time.perf_counter()
    scales = off_scales(w.req.get("off_distribution", True))
    if not scales:
        return {"off_distribution": {"skipped": "the problem opts out (STRATAGEM off_distribution)",
                                     "duration_s": time.perf_counter() - t0}}
    trials = [_run_off_distribution(w, seed, scale, visible_magnitude) for scale in scales]
    return {"off_distribution": {**trials[0], "trials": trials, "duration_s": time.perf_counter() - t0}}


def _run_off_distribution(w: StageContext, seed: int, scale: float, visible_magnitude: float) -> dict[str, Any]:
    p = w.loaded(need_candidate=True)
    assert p.candidate is not None
    inputs = off_distribution_inputs(w, seed, scale)
    with torch.no_grad():  # the candidate on a copy, then the reference on the inputs themselves
        cand_out = w.call_candidate(p.candidate, runtime.clone_inputs(inputs))
        ref_out = w.call_reference(p.reference, inputs)
        if not finite(ref_out):
            return {"scale": scale, "skipped": f"the reference is not finite on inputs scaled by {scale:g}"}
    w.recorder.save(record.offdist_key(seed, scale), cand_out)
    cmp, grow = judge_off_distribution(w, ref_out, cand_out, inputs, visible_magnitude)
    info = {"scale": scale, "atol_growth": grow, "seed": seed, **cmp.to_json()}
    if not cmp.ok:
        raise StageFailure(cmp.kind, f"with inputs off get_inputs()'s distribution (scaled by {scale:g}, "
                           f"heavy-tailed): {cmp.reason}", {"off_distribution": info})
    return info
