"""Owns a run's record as JSON, built once: what `stratagem show --json` prints and the MCP
server's `show_run` returns (docs/show-json.md), and one design's numbers as `run --json` and
the MCP tools give them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from stratagem.core.search import DesignView, ranked
from stratagem.domains.base import BaselineNames
from stratagem.report.leaderboard import best_after, failure
from stratagem.search.api import RunSummary
from stratagem.search.headline import ratios_of
from stratagem.search.numbers import counts, did_not_pass, is_ranked, not_ranked_because, passed
from stratagem.search.policies.redteam import views as redteam
from stratagem.store.records import IterationRecord


def run_json(r: RunSummary) -> dict[str, Any]:
    """The whole run as one JSON object (`show --json`; docs/show-json.md)."""
    best, names = r.best, r.names
    return {
        "run_dir": str(r.run_dir), "problem": r.problem, "domain": r.domain,
        "objective": dataclasses.asdict(r.objective),
        "status": r.run.status if r.run else None, "stop_reason": r.run.stop_reason if r.run else None,
        "iterations": len(r.iterations), **counts(r.views).to_json(),
        "best": None if best is None else design_json(best, names),
        "beats_reference": bool(best is not None and best.beats_reference),
        "headline": r.headline.to_json(),
        "reference_ms": r.reference_ms, "strategies": r.strategy_counts,
        "spend": r.spend.to_json(),
        "leaderboard": [design_json(v, names) for v in ranked(r.views)],
        "all_designs": [design_entry(v, names) for v in sorted(r.views, key=lambda v: v.created_at)],
        "iteration_log": _iteration_log(r.iterations, r.views),
        "confirmation": r.confirmation,
        **({"tuning": tuned.to_json()} if (tuned := r.tuning) is not None else {}),
        **({"redteam": redteam.to_json(r.redteam)} if r.redteam else {}),
    }


def design_json(v: DesignView, names: BaselineNames) -> dict[str, Any]:
    """One design's numbers as `show --json` and `run --json` give them (valid, ranked and the
    verdict over the compared baseline by `search/numbers.py`, as every view says them; its
    ratios are `ratios_of`'s: the confirmation round's where it timed the design, whose record
    `confirmed` then holds the search-time figure as `search`). The
    compared baseline's keys carry its name (`names.compared`; PyTorch: `speedup_compile`,
    `vs_compile`, ...); a domain without one has none (docs/show-json.md)."""
    c = names.compared
    shown = ratios_of(v, names)
    r, k = shown.reference, shown.compared
    second = {} if not c or k is None else {
        f"speedup_{c}": k.ratio,
        f"speedup_{c}_ci": None if k.low is None or k.high is None else [k.low, k.high],
        f"{c}_chained": k.chained, f"{c}_confirmed": k.confirmed, f"vs_{c}": k.verdict,
        f"{c}_fails": v.compared_fails or None, f"{c}_unstable": v.compared_unstable or None}
    stability = (v.stability if v.status in ("unstable", "busy") and v.stability
                 else next((n for n in v.timing_notes if "ranked on the confirmation round" in n), "stable"))
    return {"id": v.id, "status": v.status, "valid": passed(v), "ranked": is_ranked(v),
            "not_ranked": not_ranked_because(v) or None, "runtime_ms": v.runtime_ms, "speedup": r.ratio,
            "speedup_ci": None if r.low is None or r.high is None else [r.low, r.high],
            **second, "tags": dict(v.tags),
            "beats_reference": v.beats_reference,
            "stability": stability, "timing_notes": list(v.timing_notes),
            "confirmed": v.confirmed.to_json(names.key, names.compared) if v.confirmed is not None else None}


def design_entry(v: DesignView, names: BaselineNames) -> dict[str, Any]:
    """One design of `show --json`'s `all_designs`: its numbers, lineage and, when it did not
    pass, the validator that failed it and why."""
    out = {**design_json(v, names), "iteration": v.iteration, "author": v.author, "strategy": v.strategy,
           "parents": list(v.parents), "created_at": v.created_at, "measures": dataclasses.asdict(v.measures)}
    if did_not_pass(v):
        where, why = failure(v)
        out.update(failed_at=where, reason=_whole_reason(v.report, why), report=v.report)
    return out


def _whole_reason(report: str, first_line: str) -> str:
    """The whole reason of the first failure in a report (`[validator] kind: reason`, which may
    go on over several lines until the next validator's), where the tables show its first
    line clipped at a word."""
    lines = (report or "").strip().splitlines()
    if not lines or not lines[0].startswith("[") or "] " not in lines[0]:
        return first_line
    block = [first_line]
    for line in lines[1:]:
        if line.startswith("[") or line.startswith("Skipped: "):
            break
        block.append(line)
    return "\n".join(block)


def _iteration_log(iterations: Sequence[IterationRecord], views: Sequence[DesignView]) -> list[dict[str, Any]]:
    """`show --json`'s `iteration_log`: each iteration's plan, designs, and the best after it."""
    out = []
    for it, made, best in best_after(iterations, views):
        out.append({"n": it.n, "status": it.status, "strategy": (it.plan or {}).get("strategy"),
                    "plan": it.plan, "context": it.context_ids, "designs": list(it.design_ids),
                    "valid": counts(made).valid, "note": it.note,
                    "best_after": None if best is None else {"id": best.id, "speedup": best.speedup,
                                                              "speedup_ci": [best.speedup_low, best.speedup_high]},
                    "started_at": it.started_at, "finished_at": it.finished_at})
    return out
