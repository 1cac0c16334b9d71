"""Owns the results of a suite of runs (one per problem): `stratagem report --suite` (an HTML
page) and `stratagem bench --json` (the same numbers as JSON).

The runs are either given one by one or read from a suite directory (`stratagem bench`'s
suite.json lists its problems and their states).

Per problem: the best design, its paired speedup over eager and over torch.compile with
their intervals, whether any design passed (correctness), queries, money and device time.
Summaries (`summary`, each key named in `LABELS`): fast_p (KernelBench's: the share of
problems whose best design is correct and faster than p times eager) for p = 0, 1, 1.5 and
2, over eager and over compile; the geometric means of the best speedups over eager and over
compile, unclamped (problems without a valid design left out, and counted) and clamped at
1x as PIKE reports it (slowdowns and problems without a valid design count as 1.00x); the
correctness rate; and the cost per problem.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratagem.report.html import CSS, _table, load_run
from stratagem.search.budget import Spend
from stratagem.search.numbers import compile_text, passed
from stratagem.search.suite_manifest import is_suite_dir, read_manifest
from stratagem.store.sqlite import RunStore

FAST_P = (0.0, 1.0, 1.5, 2.0)

NOT_COUNTED = frozenset({"pending", "skipped"})
"""Problem states left out of the summaries: not run yet, or not searchable by the policy."""

LABELS: dict[str, str] = {
    **{f"fast_{p:g}": f"fast_{p:g}: share of problems whose best design is correct and > {p:g}x eager"
       for p in FAST_P},
    **{f"fast_{p:g}_compile": f"fast_{p:g} over compile: share of problems whose best design is correct and "
                              f"> {p:g}x torch.compile" for p in FAST_P},
    "correct_rate": "correctness rate: share of problems with at least one design that passed every check",
    "geomean_measured": "geometric mean of the best speedups over eager, unclamped: problems without a valid "
                        "design are left out (counted in geomean_excluded)",
    "geomean_excluded": "problems left out of the unclamped geometric mean over eager: no valid design (or "
                        "none whose paired timing settled, so none ranked)",
    "geomean_clamped": "geometric mean over eager, clamped at 1x as PIKE reports it: slowdowns and problems "
                       "without a valid design (or none ranked) count as 1.00x",
    "geomean_compile_measured": "geometric mean of the best speedups over torch.compile, unclamped: problems "
                                "without a figure over compile are left out (counted in geomean_compile_excluded)",
    "geomean_compile_excluded": "problems left out of the unclamped geometric mean over compile: no valid design, "
                                "or no compile baseline measured",
    "geomean_compile_clamped": "geometric mean over torch.compile, clamped at 1x as PIKE reports it: slowdowns and "
                               "problems without a valid design (or none ranked) count as 1.00x; problems whose "
                               "best design has no compile figure are left out",
    "problems": "problems in the suite",
    "counted": "problems counted in these summaries (run, or running; not pending or skipped)",
    "queries_per_problem": "LLM queries per counted problem (mean)",
    "usd_per_problem": "money per counted problem (USD, mean; unpriced models count 0)",
    "device_s_per_problem": "device seconds per counted problem (mean evaluation worker time)",
}


@dataclass(frozen=True)
class ProblemRow:
    """One problem's results (its run's best design and spend)."""

    run_dir: Path | None
    """None when the problem has no run yet (pending, skipped, or failed before it started)."""
    problem: str
    policy: str
    speedup: float | None
    """The best ranked design's paired speedup over eager (None: no ranked design)."""
    low: float | None
    high: float | None
    compile_text: str
    beats: bool
    queries: int
    usd: float
    key: str = ""
    """The suite's name for the problem (its run directory's name); the problem's name otherwise."""
    state: str = "done"
    """The suite manifest's state (`suite_manifest.ProblemStateName`); `done` for a run given by hand."""
    best_id: str | None = None
    speedup_compile: float | None = None
    """The best design's speedup over torch.compile (chained via eager; None: not measured)."""
    compile_low: float | None = None
    compile_high: float | None = None
    correct: bool = False
    """At least one design passed every check."""
    designs: int = 0
    valid: int = 0
    device_s: float = 0.0
    """Evaluation worker seconds, on whatever device evaluated."""
    note: str | None = None
    """The run's stop reason, or why the problem failed or was skipped."""

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key or self.problem, "problem": self.problem, "state": self.state,
                "run_dir": str(self.run_dir) if self.run_dir is not None else None, "policy": self.policy,
                "best": self.best_id, "correct": self.correct, "designs": self.designs, "valid": self.valid,
                "speedup": self.speedup,
                "speedup_ci": None if self.low is None or self.high is None else [self.low, self.high],
                "speedup_compile": self.speedup_compile,
                "speedup_compile_ci": None if self.compile_low is None or self.compile_high is None
                else [self.compile_low, self.compile_high],
                "beats_eager": self.beats, "queries": self.queries, "usd": self.usd,
                "device_s": self.device_s, "note": self.note}


def row_of(run_dir: Path, key: str = "", state: str = "done", note: str | None = None) -> ProblemRow:
    """A run directory's row (read only)."""
    data = load_run(run_dir)
    b = data.best
    spend = Spend.from_records(data.calls, data.evaluations)
    stop = data.run.stop_reason if data.run else None
    return ProblemRow(run_dir, data.problem, data.run.policy if data.run else "?",
                      b.speedup if b else None, b.speedup_low if b else None, b.speedup_high if b else None,
                      compile_text(b) if b else "-", bool(b and b.beats_reference), spend.queries, spend.usd,
                      key=key or data.problem, state=state, best_id=b.id if b else None,
                      speedup_compile=b.speedup_compile if b else None, compile_low=b.compile_low if b else None,
                      compile_high=b.compile_high if b else None, correct=any(passed(v) for v in data.views),
                      designs=len(data.views), valid=sum(1 for v in data.views if passed(v)),
                      device_s=spend.gpu_seconds, note=note or stop)


def rows_of(run_dirs: Sequence[Path]) -> list[ProblemRow]:
    """Rows of run directories, a suite directory standing for each of its problems."""
    out: list[ProblemRow] = []
    for d in run_dirs:
        out.extend(rows_of_suite(d) if is_suite_dir(d) else [row_of(d)])
    return out


def rows_of_suite(suite_dir: Path) -> list[ProblemRow]:
    """One row per problem of a suite directory, in the manifest's order (a problem without a
    run database yet has an empty row with its state)."""
    manifest = read_manifest(suite_dir)
    policy = str((manifest.config.get("search") or {}).get("policy") or "?")
    out = []
    for e in manifest.problems:
        d = Path(suite_dir) / e.run_dir
        if (d / RunStore.DB_NAME).exists():
            out.append(row_of(d, key=e.key, state=e.state, note=e.stop_reason))
        else:
            out.append(ProblemRow(None, Path(e.path).stem if e.path.endswith(".py") else Path(e.path).name,
                                  policy, None, None, None, "-", False, 0, 0.0, key=e.key, state=e.state,
                                  note=e.stop_reason))
    return out


def fast_p(rows: Sequence[ProblemRow], p: float, over: str = "eager") -> float:
    """The share of problems whose best design is correct and faster than p x eager (p = 0:
    correct at all); `over="compile"`: than p x torch.compile."""
    if not rows:
        return 0.0
    s = [r.speedup if over == "eager" else r.speedup_compile for r in rows]
    return sum(1 for x in s if x is not None and x > p) / len(rows)


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def counted(rows: Sequence[ProblemRow]) -> list[ProblemRow]:
    """The rows the summaries count (not pending, not skipped)."""
    return [r for r in rows if r.state not in NOT_COUNTED]


def summary(rows: Sequence[ProblemRow]) -> dict[str, float | None]:
    """The suite's summaries, each key described in `LABELS` (rates in [0, 1], ratios as x)."""
    all_rows = list(rows)
    rows = counted(all_rows)
    n = len(rows)
    eager = [r.speedup for r in rows if r.speedup is not None]
    comp = [r.speedup_compile for r in rows if r.speedup_compile is not None]
    out: dict[str, float | None] = {"problems": len(all_rows), "counted": n}
    out.update({f"fast_{p:g}": fast_p(rows, p) for p in FAST_P})
    out.update({f"fast_{p:g}_compile": fast_p(rows, p, "compile") for p in FAST_P})
    out.update(
        correct_rate=sum(1 for r in rows if r.correct) / n if n else 0.0,
        geomean_measured=geomean(eager), geomean_excluded=n - len(eager),
        geomean_clamped=geomean([max(1.0, r.speedup) if r.speedup is not None else 1.0 for r in rows]),
        geomean_compile_measured=geomean(comp), geomean_compile_excluded=n - len(comp),
        geomean_compile_clamped=geomean([max(1.0, r.speedup_compile) if r.speedup_compile is not None else 1.0
                                         for r in rows if r.speedup is None or r.speedup_compile is not None]),
        queries_per_problem=sum(r.queries for r in rows) / n if n else None,
        usd_per_problem=sum(r.usd for r in rows) / n if n else None,
        device_s_per_problem=sum(r.device_s for r in rows) / n if n else None,
    )
    return out


def suite_json(rows: Sequence[ProblemRow]) -> dict[str, Any]:
    """`bench --json`'s results: the summaries, what each means, and every problem's row."""
    return {"summary": summary(rows), "labels": dict(LABELS), "problems": [r.to_json() for r in rows]}


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _with_ci(x: float | None, lo: float | None, hi: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "")


def summary_lines(s: dict[str, float | None]) -> list[tuple[str, str]]:
    """The summaries as (label, value) pairs, in the order the page and the console give them."""
    out = [(LABELS[f"fast_{p:g}"].split(": ", 1)[0] + f" (correct and > {p:g}x eager)", _pct(s[f"fast_{p:g}"]))
           for p in FAST_P]
    out += [(LABELS[f"fast_{p:g}_compile"].split(": ", 1)[0], _pct(s[f"fast_{p:g}_compile"])) for p in FAST_P]
    out += [(LABELS["correct_rate"], _pct(s["correct_rate"]))]
    for k in ("geomean_measured", "geomean_clamped", "geomean_compile_measured", "geomean_compile_clamped"):
        out.append((LABELS[k], _ratio(s[k])))
    out += [(LABELS["geomean_excluded"], f"{s['geomean_excluded']:g}"),
            (LABELS["geomean_compile_excluded"], f"{s['geomean_compile_excluded']:g}"),
            (LABELS["counted"], f"{s['counted']:g} of {s['problems']:g}")]
    for k, fmt in (("queries_per_problem", "{:.1f}"), ("usd_per_problem", "{:.3g}"), ("device_s_per_problem", "{:.1f}")):
        v = s[k]
        out.append((LABELS[k], "-" if v is None else fmt.format(v)))
    return out


def problem_table_rows(rows: Sequence[ProblemRow]) -> list[tuple[str, ...]]:
    return [(r.key or r.problem, r.state, r.policy, (r.best_id or "-")[:12], _with_ci(r.speedup, r.low, r.high),
             r.compile_text if r.compile_text != "-" else _with_ci(r.speedup_compile, r.compile_low, r.compile_high),
             "yes" if r.correct else "no", "yes" if r.beats else "no", str(r.queries), f"{r.usd:.3g}",
             f"{r.device_s:.1f}", str(r.run_dir or "-")) for r in rows]


PROBLEM_HEADER = ["problem", "state", "policy", "best design", "best vs eager [95% CI]",
                  "vs compile [95% CI], chained via eager", "correct", "beats eager", "queries", "USD",
                  "device s", "run"]


def build_suite_page(rows: Sequence[ProblemRow]) -> str:
    s = summary(rows)
    table = _table(PROBLEM_HEADER, problem_table_rows(rows))
    summ = _table(["summary", "value"], summary_lines(s))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>stratagem suite</title><style>{CSS}</style>"
            f"</head><body><h1>stratagem · {len(rows)} problems</h1><p class=muted>generated {stamp}; speedups are "
            f"paired (timed beside eager in each design's worker)</p><h2>Summary</h2>{summ}<h2>Problems</h2>{table}"
            f"</body></html>")


def build_suite(run_dirs: Sequence[Path]) -> str:
    """The suite page over run directories (a suite directory stands for its problems)."""
    return build_suite_page(rows_of(run_dirs))


def write_suite(run_dirs: Sequence[Path], out: Path) -> Path:
    out.write_text(build_suite(run_dirs), encoding="utf-8")
    return out
