"""Owns `stratagem report --suite`: one HTML page over many runs (one per problem).

Per problem: the policy, the best design's paired speedup over eager with its interval (or
none), over torch.compile, whether it beats eager beyond its interval, queries and money
spent. Summaries: fast_p (KernelBench's: the share of problems whose best design is correct
and faster than p times eager) for p = 0, 1, 1.5 and 2, and the geometric mean of the best
speedups, both as measured and with slowdowns and missing designs counted as 1.00x (PIKE's
clamped score: a problem with nothing better falls back to eager). Both are shown, named.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stratagem.report.html import CSS, _table, load_run, st_spend
from stratagem.search.numbers import compile_text

FAST_P = (0.0, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class ProblemRow:
    run_dir: Path
    problem: str
    policy: str
    speedup: float | None
    low: float | None
    high: float | None
    compile_text: str
    beats: bool
    queries: int
    usd: float


def rows_of(run_dirs: Sequence[Path]) -> list[ProblemRow]:
    out = []
    for d in run_dirs:
        data = load_run(d)
        b = data.best
        spend = st_spend(data)
        out.append(ProblemRow(d, data.problem, data.run.policy if data.run else "?",
                              b.speedup if b else None, b.speedup_low if b else None, b.speedup_high if b else None,
                              compile_text(b) if b else "-", bool(b and b.beats_reference), spend["queries"],
                              spend["usd"]))
    return out


def fast_p(rows: Sequence[ProblemRow], p: float) -> float:
    """The share of problems whose best design is correct and faster than p x eager (p = 0:
    correct at all)."""
    if not rows:
        return 0.0
    return sum(1 for r in rows if r.speedup is not None and r.speedup > p) / len(rows)


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def summary(rows: Sequence[ProblemRow]) -> dict[str, float | None]:
    measured = geomean([r.speedup for r in rows if r.speedup is not None])
    clamped = geomean([max(1.0, r.speedup) if r.speedup is not None else 1.0 for r in rows])
    out: dict[str, float | None] = {f"fast_{p:g}": fast_p(rows, p) for p in FAST_P}
    out.update(geomean_measured=measured, geomean_clamped=clamped)
    return out


def build_suite(run_dirs: Sequence[Path]) -> str:
    rows = rows_of(run_dirs)
    s = summary(rows)
    table = _table(["problem", "policy", "best vs eager [95% CI]", "vs compile [95% CI], chained via eager",
                    "beats eager", "queries", "USD", "run"],
                   [(r.problem, r.policy,
                     "-" if r.speedup is None else f"{r.speedup:.2f}x" + (
                         f" [{r.low:.2f}, {r.high:.2f}]" if r.low is not None and r.high is not None else ""),
                     r.compile_text, "yes" if r.beats else "no", r.queries, f"{r.usd:.3g}", str(r.run_dir))
                    for r in sorted(rows, key=lambda r: r.problem)])

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}x"

    summ = _table(["summary", "value"], [
        *[(f"fast_{p:g} (correct and > {p:g}x eager)", pct(s[f"fast_{p:g}"])) for p in FAST_P],
        ("geometric mean of the best speedups, as measured (problems with a valid design)", ratio(s["geomean_measured"])),
        ("geometric mean, slowdowns and problems without a design counted as 1.00x (PIKE's clamped score)",
         ratio(s["geomean_clamped"])),
    ])
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>stratagem suite</title><style>{CSS}</style>"
            f"</head><body><h1>stratagem · {len(rows)} problems</h1><p class=muted>generated {stamp}; speedups are "
            f"paired (timed beside eager in each design's worker)</p><h2>Summary</h2>{summ}<h2>Problems</h2>{table}"
            f"</body></html>")


def write_suite(run_dirs: Sequence[Path], out: Path) -> Path:
    out.write_text(build_suite(run_dirs), encoding="utf-8")
    return out


