"""Owns the `eval` view's lines that domains share (`Domain.describe`): a correctness stage's
trials and largest errors, and a paired `timing` stage's details (the design's median and
spread, the reference's median beside it, the block pairs and timings, the sizes timed at)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe_timing(d: Mapping[str, Any], reference: str) -> str:
    """`d`: a passed timing's details (`runtime`, `reference`, `pairs`, `attempts`, `sizes`);
    `reference`: how the views name the reference."""
    rt, ref = d["runtime"], d.get("reference") or {}
    text = f"median {rt['median_ms']:.4f} ms, IQR {rt['iqr_ms']:.4f} ms, n={rt['n']}"
    if ref:
        settled = f" (settled; {d.get('planned_pairs')} planned)" if d.get("stop") == "settled" else ""
        text += (f"; {reference} beside it {ref['median_ms']:.4f} ms, {d.get('pairs')} block pairs{settled}, "
                 f"{len(d.get('attempts') or [])} timing(s)")
    timed_at = d.get("sizes")
    if isinstance(timed_at, dict) and timed_at:  # the fixed sizes a domain times at
        text += "; timed at " + ", ".join(f"{k}={x:g}" if isinstance(x, float) else f"{k}={x}"
                                          for k, x in timed_at.items())
    return text


def describe_correctness(d: Mapping[str, Any]) -> str:
    """The trials, the largest errors (`trials`, `max_abs_err`, `max_rel_err`), the rule that
    decided (`decided_by`) and the benchmarks' rules (`benchmarks`), where the details have them."""
    text = f"{len(d['trials'])} trials, max abs err {d['max_abs_err']:.3g}, max rel err {d['max_rel_err']:.3g}"
    if d.get("decided_by"):  # the rule that decided, with the precision the reference ran at
        text += f"; decided by {d['decided_by']}"
    bench = d.get("benchmarks") or {}
    if bench:
        text += "; " + ", ".join(f"{k}'s rule: {'pass' if v.get('ok') else 'FAIL'}" for k, v in bench.items())
    return text
