"""Owns the problem audit in the worker: null models that should never pass correctness.

Worker-side only. For two fresh seeds, the reference output is compared (with the problem's
tolerances) against outputs a lazy or cheating candidate could produce without computing:
zeros, a constant (the output's mean), a copy of an input of the same shape (identity), the
reference computed in half precision, and a subsample (every other element along the last
dimension copied from its neighbour). Any that passes means the problem can be cheated by
construction. It also reports whether the output depends on the inputs' seed at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from stratagem.domains.pytorch.worker import compare, runtime

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext


def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, list | tuple) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return None


def _subsample(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    if out.dim() == 0 or out.shape[-1] < 2:
        return out
    n_odd = out.shape[-1] // 2
    out[..., 1::2] = out[..., 0::2][..., :n_odd]
    return out


def _half(w: StageContext, inputs: list[Any]) -> Any:
    dtype = torch.float16 if w.device.startswith("cuda") else torch.bfloat16
    p = w.loaded(need_candidate=False)
    model = runtime.instantiate(p.reference_module.Model, p.init_inputs, int(w.req["init_seed"]), w.device)
    model = model.to(dtype)
    low = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        out = model(*low)
    return out


def run_audit(w: StageContext) -> dict[str, Any]:
    p = w.loaded(need_candidate=False)
    tol = w.req["tolerances"]
    seeds = [int(s) for s in w.req["seeds"][:2]]
    outputs: list[Any] = []
    nulls: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:
        inputs = w.make_inputs(p, seed)
        with torch.no_grad():
            ref = w.call_reference(p.reference, runtime.clone_inputs(inputs))
        outputs.append(ref)
        t = _first_tensor(ref)
        if t is None:
            continue
        candidates: dict[str, Callable[[], Any]] = {
            "zeros": lambda t=t: torch.zeros_like(t),
            "constant": lambda t=t: torch.full_like(t, float(t.double().mean())) if t.is_floating_point() else t.clone(),
            "subsample": lambda t=t: _subsample(t),
            "half_precision": lambda inputs=inputs, t=t: _cast_like(_first_tensor(_half(w, inputs)), t),
        }
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.shape == t.shape and x.dtype == t.dtype:
                candidates[f"input_{i}_copy"] = lambda x=x: x.clone()
        for name, make in candidates.items():
            try:
                null = make()
            except Exception as e:  # noqa: BLE001 - a null model that cannot be built does not pass
                nulls.setdefault(name, []).append({"seed": seed, "passes": False, "error": runtime.one_line(e)})
                continue
            c = compare.compare_outputs(t, null, tol) if null is not None else compare.Comparison(False, "no output")
            nulls.setdefault(name, []).append({"seed": seed, "passes": c.ok, "max_abs_err": c.max_abs_err})
    seed_dependent = True
    if len(outputs) == 2:
        seed_dependent = not compare.compare_outputs(outputs[0], outputs[1], tol).ok
    passing = sorted(n for n, rs in nulls.items() if rs and all(r["passes"] for r in rs))
    t0 = _first_tensor(outputs[0]) if outputs else None
    stats: dict[str, Any] = {}
    if t0 is not None and t0.is_floating_point() and t0.numel():
        d = t0.double()
        stats = {"shape": list(t0.shape), "dtype": str(t0.dtype).removeprefix("torch."),
                 "mean": float(d.mean()), "std": float(d.std()) if d.numel() > 1 else 0.0,
                 "max_abs": float(d.abs().max())}
    return {"nulls": nulls, "passing_nulls": passing, "seed_dependent": seed_dependent,
            "output": stats, "seeds": seeds}


def _cast_like(x: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x.to(like.dtype)
