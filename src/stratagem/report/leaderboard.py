"""Owns the terminal views of a run's results: the leaderboard, strategy counts and the
spend line (rich renderables built from the store's records; nothing is computed that the
store lacks beyond ranking and ratios)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.table import Table

from stratagem.search.budget import Spend
from stratagem.search.types import DesignView
from stratagem.store.records import IterationRecord


def leaderboard(
    views: Sequence[DesignView], reference_ms: Mapping[str, float | None], top: int = 10
) -> Table:
    """Valid designs fastest first, with speedups against eager and torch.compile."""
    t = Table(title="Leaderboard", title_justify="left")
    for col in ("#", "design", "runtime ms", "vs eager", "vs compile", "iter"):
        t.add_column(col, justify="left" if col == "design" else "right", no_wrap=True)
    t.add_column("author · strategy", overflow="fold")
    valid = sorted((v for v in views if v.status == "valid" and v.runtime_ms), key=lambda v: v.runtime_ms or 0.0)
    eager, comp = reference_ms.get("eager"), reference_ms.get("compile")
    for i, v in enumerate(valid[:top], 1):
        rt = v.runtime_ms or 0.0
        t.add_row(str(i), v.id[:10], f"{rt:.4f}", f"{eager / rt:.2f}x" if eager else "-",
                  f"{comp / rt:.2f}x" if comp else "-", "-" if v.iteration is None else str(v.iteration),
                  f"{v.author or '-'} · {v.strategy or '-'}")
    notes = []
    if eager or comp:
        notes.append("reference: " + ", ".join(f"{k} {v:.4f} ms" for k, v in reference_ms.items() if v))
    waiting = sorted((v for v in views if v.status == "unreviewed"), key=lambda v: v.runtime_ms or 0.0)
    if waiting:
        notes.append("not ranked until reviewed (the Analyst's review failed): " + ", ".join(
            f"{v.id[:10]} {v.runtime_ms or 0.0:.4f} ms" for v in waiting[:5]))
    t.caption = "\n".join(notes) or None
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
    usd = f"${spend.usd:.4f}" + (f" (+{spend.unpriced_calls} unpriced calls)" if spend.unpriced_calls else "")
    failed = f" · [red]{spend.failed_calls} failed LLM calls[/]" if spend.failed_calls else ""
    return (f"LLM queries {spend.queries} · tokens {spend.tokens:,} · {usd} · retries {spend.retries}"
            f"{failed} · evaluations {spend.evaluations} · device {spend.gpu_seconds:.1f} s")


def iterations_table(iterations: Sequence[IterationRecord], views: Sequence[DesignView], last: int = 20) -> Table:
    """Each iteration: status, strategy, designs made, valid ones, the best runtime after it."""
    t = Table(title="Iterations", title_justify="left")
    for col in ("#", "status", "strategy", "designs", "valid", "best ms after"):
        t.add_column(col, justify="left" if col in ("status", "strategy") else "right")
    by_id = {v.id: v for v in views}
    best = float("inf")
    rows = []
    for it in iterations:
        made = [by_id[i] for i in it.design_ids if i in by_id]
        ok = [v.runtime_ms for v in made if v.status == "valid" and v.runtime_ms is not None]
        best = min([best, *ok])
        strategy = str((it.plan or {}).get("strategy") or "-")
        rows.append((str(it.n), it.status, strategy, str(len(made)), str(len(ok)),
                     "-" if best == float("inf") else f"{best:.4f}"))
    for row in rows[-last:]:
        t.add_row(*row)
    return t
