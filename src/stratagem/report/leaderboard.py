"""Owns the terminal views of a run's results: the leaderboard, strategy counts and the
spend line (rich renderables built from the store's records; nothing is computed that the
store lacks beyond ranking and ratios)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.table import Table

from stratagem.core.objective import Objective
from stratagem.core.search import DesignView, ranked
from stratagem.search.budget import Spend
from stratagem.store.records import IterationRecord

RUNTIME = Objective("runtime", "ms", "minimize")


def leaderboard(
    views: Sequence[DesignView], reference_ms: Mapping[str, float | None], top: int = 10,
    objective: Objective = RUNTIME,
) -> Table:
    """Ranked designs by paired speedup (the improvement over the reference in the domain's
    `objective`), with its interval and the speedup over torch.compile (the same numbers the
    store, `show --json` and the agents' context hold)."""
    t = Table(title="Leaderboard", title_justify="left")
    for col in ("#", "design", f"{objective.name} {objective.unit}", "vs eager [95% CI]", "vs compile", "iter"):
        t.add_column(col, justify="left" if col == "design" else "right", no_wrap=True)
    t.add_column("author · strategy", overflow="fold")
    for i, v in enumerate(ranked(views)[:top], 1):
        mark = "" if v.beats_reference else " [dim](within noise of eager)[/]" if (v.speedup or 0) >= 1 else ""
        t.add_row(str(i), v.id[:10], f"{v.runtime_ms or 0.0:.4f}", v.speedup_text() + mark,
                  v.compile_text(),
                  "-" if v.iteration is None else str(v.iteration), f"{v.author or '-'} · {v.strategy or '-'}")
    notes = []
    if any(reference_ms.values()):
        notes.append("reference: " + ", ".join(f"{k} {v:.4f} ms" for k, v in reference_ms.items() if v))
    waiting = [v for v in views if v.status == "unreviewed"]
    if waiting:
        notes.append("not ranked until reviewed (the Analyst's review failed): " + ", ".join(
            f"{v.id[:10]} {v.speedup_text()}" for v in waiting[:5]))
    failing = next((v.compile_fails for v in ranked(views) if v.compile_fails), "")
    if failing:
        notes.append("the torch.compile baseline fails the correctness check every design must pass, so "
                      f"speedups against it are not a fair comparison: {failing[:160]}")
    shaky = next((v.compile_unstable for v in ranked(views) if v.compile_unstable), "")
    if shaky:
        notes.append("the torch.compile baseline's timing stayed unstable after re-timing, so speedups against "
                     f"it carry its noise (`stratagem baseline --refresh` measures it again): {shaky[:160]}")
    unstable = [v for v in views if v.status == "unstable"]
    if unstable:
        notes.append("not ranked, timing unstable: " + "; ".join(
            f"{v.id[:10]} {v.speedup_text()} ({v.stability[:80]})" for v in unstable[:5]))
    t.caption = "\n".join(notes) or None
    return t


def failure(v: DesignView) -> tuple[str, str]:
    """(the first failing validator, its kind and reason) of a design that is not valid, from
    its report (`[validator] kind: reason`); a review's or a stability reason otherwise."""
    first = (v.report or "").strip().splitlines()[0] if (v.report or "").strip() else ""
    if first.startswith("[") and "] " in first:
        name, rest = first[1:].split("] ", 1)
        return name, rest
    if v.status == "unstable":
        return "timing", f"unstable: {v.stability}"
    return v.status, first or "-"


FAILING = ("invalid", "error", "flagged", "unstable", "unreviewed", "needs_gpu")


def failures_table(views: Sequence[DesignView], last: int = 12) -> Table | None:
    """Every design that is not valid (the latest `last`): which validator failed it and why."""
    bad = [v for v in views if v.status in FAILING]
    if not bad:
        return None
    t = Table(title=f"Designs that did not pass ({len(bad)})", title_justify="left")
    for col in ("design", "iter", "author", "failed at"):
        t.add_column(col, no_wrap=True)
    t.add_column("reason", overflow="fold")
    for v in sorted(bad, key=lambda v: v.created_at)[-last:]:
        where, why = failure(v)
        t.add_row(v.id[:10], "-" if v.iteration is None else str(v.iteration), v.author or "-", where,
                  why[:300])
    if len(bad) > last:
        t.caption = f"{len(bad) - last} earlier ones: `stratagem show --json RUN_DIR` lists all"
    return t


def strategy_table(counts: Mapping[str, Mapping[str, int]]) -> Table:
    t = Table(title="Strategies", title_justify="left")
    t.add_column("strategy")
    t.add_column("designs", justify="right")
    t.add_column("valid", justify="right")
    for name, c in sorted(counts.items()):
        t.add_row(name, str(c["designs"]), str(c["valid"]))
    return t


def spend_line(spend: Spend) -> str:
    usd = f"${spend.usd:.4f}" + (f" ({spend.unpriced_calls} of {spend.calls} agent calls unpriced)"
                                 if spend.unpriced_calls else "")
    failed = f" · [red]{spend.failed_calls} failed agent calls[/]" if spend.failed_calls else ""
    calls = f" in {spend.calls} agent calls" if spend.calls else ""
    return (f"LLM queries {spend.queries}{calls} · tokens {spend.tokens:,} · {usd} · retries {spend.retries}"
            f"{failed} · evaluations {spend.evaluations} · device {spend.gpu_seconds:.1f} s")


def iterations_table(iterations: Sequence[IterationRecord], views: Sequence[DesignView], last: int = 20) -> Table:
    """Each iteration: status, strategy, designs made, ranked ones, the best speedup after it,
    and its note (why it ended as it did: failed agent calls, a stop, a review)."""
    t = Table(title="Iterations", title_justify="left")
    for col in ("#", "status", "strategy", "designs", "valid", "best after (vs eager)"):
        t.add_column(col, justify="left" if col in ("status", "strategy") else "right")
    t.add_column("note", overflow="fold")
    by_id = {v.id: v for v in views}
    best: DesignView | None = None
    rows = []
    for it in iterations:
        made = [by_id[i] for i in it.design_ids if i in by_id]
        ok = ranked(made)
        if ok and (best is None or (ok[0].speedup or 0) > (best.speedup or 0)):
            best = ok[0]
        strategy = str((it.plan or {}).get("strategy") or "-")
        rows.append((str(it.n), it.status, strategy, str(len(made)), str(len(ok)),
                     "-" if best is None else best.speedup_text(), (it.note or "")[:300]))
    for row in rows[-last:]:
        t.add_row(*row)
    return t
