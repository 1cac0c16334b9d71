"""Owns the results of a suite of runs (one per problem): `stratagem report --suite` (an HTML
page) and `stratagem bench --json` (the same numbers as JSON).

The runs are either given one by one or read from a suite directory (`stratagem bench`'s
suite.json lists its problems and their states).

Per problem: the best design, its paired speedup over the reference and over the baseline
its domain sets beside it (`BaselineNames`: the first domain names both) with their
intervals, whether any design passed (correctness), queries, money and device time.
Summaries (`summary`, each key named in `labels`): fast_p (KernelBench's: the share of
problems whose best design is correct and faster than p times the reference) for p = 0, 1,
1.5 and 2, over the reference and over the compared baseline; the geometric means of the best
speedups over each, unclamped (problems without a valid design left out, and counted) and
clamped at 1x as PIKE reports it (slowdowns and problems without a valid design count as
1.00x); the correctness rate; and the cost per problem. The words and the compared baseline's
keys (`fast_1_<mode>`, `geomean_<mode>_measured`, `speedup_<mode>`) come from the problems'
domain (the default domain's when they have several).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratagem.core.jsonish import mapping
from stratagem.domains import names_of
from stratagem.domains.base import BaselineNames
from stratagem.report.html import CSS, _table, load_run
from stratagem.search.headline import headline_of
from stratagem.search.numbers import passed
from stratagem.search.suite_manifest import is_suite_dir, read_manifest
from stratagem.store.sqlite import RunStore

FAST_P = (0.0, 1.0, 1.5, 2.0)

NOT_COUNTED = frozenset({"pending", "skipped"})
"""Problem states left out of the summaries: not run yet, or not searchable by the policy."""

def labels(names: BaselineNames) -> dict[str, str]:
    """What each summary key means, in the words of the problems' domain (`names`); the keys of
    the compared baseline only when the domain has one."""
    r, c, long = names.reference, names.compared, names.compared_text
    out = {
        **{f"fast_{p:g}": f"fast_{p:g}: share of problems whose best design is correct and > {p:g}x {r} by more than its "
                             "95% interval (its low end above p)"
           for p in FAST_P},
        **({f"fast_{p:g}_{c}": f"fast_{p:g} over {c}: share of problems whose best design is correct and "
                               f"> {p:g}x {long} by more than its interval" for p in FAST_P} if c else {}),
        "correct_rate": "correctness rate: share of problems with at least one design that passed every check",
        "geomean_measured": f"geometric mean of the best speedups over {r}, unclamped: problems without a valid "
                            "design are left out (counted in geomean_excluded)",
        "geomean_excluded": f"problems left out of the unclamped geometric mean over {r}: no valid design (or "
                            "none whose paired timing settled, so none ranked)",
        "geomean_clamped": f"geometric mean over {r}, clamped at 1x as PIKE reports it: slowdowns and problems "
                           "without a valid design (or none ranked) count as 1.00x",
    }
    if c:
        out.update({
            f"geomean_{c}_measured": f"geometric mean of the best speedups over {long}, unclamped: problems "
                                     f"without a figure over {c} are left out (counted in geomean_{c}_excluded)",
            f"geomean_{c}_excluded": f"problems left out of the unclamped geometric mean over {c}: no valid "
                                     f"design, or no {c} baseline measured",
            f"geomean_{c}_clamped": f"geometric mean over {long}, clamped at 1x as PIKE reports it: slowdowns and "
                                    "problems without a valid design (or none ranked) count as 1.00x; problems "
                                    f"whose best design has no {c} figure are left out",
        })
    return {
        **out,
        "problems": "problems in the suite",
        "counted": "problems counted in these summaries (run, or running; not pending or skipped)",
        "queries_per_problem": "LLM queries per counted problem (mean)",
        "usd_per_problem": "money per counted problem (USD, mean; unpriced models count 0)",
        "device_s_per_problem": "device seconds per counted problem (mean evaluation worker time)",
        "wall_s_per_problem": "wall seconds per counted problem (mean time its runs ran: baselines, search and "
                              "confirmation, summed over resumptions)",
        "evaluations_per_gpu_hour": "evaluations per GPU-hour: every evaluation (designs and baselines) over the "
                                    "suite's wall time (its bench sessions, not the gaps between them) times the "
                                    "GPUs that evaluated",
        "evaluations_per_device_hour": "evaluations per hour of evaluation worker time (device seconds)",
        "untimed_problems": "problems whose running time no bench session recorded (run before the suite kept "
                            "sessions): left out of the wall seconds and evaluations per GPU-hour",
    }


@dataclass(frozen=True)
class ProblemRow:
    """One problem's results (its run's best design and spend)."""

    run_dir: Path | None
    """None when the problem has no run yet (pending, skipped, or failed before it started)."""
    problem: str
    policy: str
    speedup: float | None
    """The best ranked design's paired speedup over the reference (None: no ranked design)."""
    low: float | None
    high: float | None
    second_text: str
    """Its ratio over the compared baseline, as every view writes it (`-`: none)."""
    beats: bool
    queries: int
    usd: float
    key: str = ""
    """The suite's name for the problem (its run directory's name); the problem's name otherwise."""
    state: str = "done"
    """The suite manifest's state (`suite_manifest.ProblemStateName`); `done` for a run given by hand."""
    best_id: str | None = None
    second: float | None = None
    """The best design's speedup over the compared baseline (chained via the reference; None:
    not measured)."""
    second_low: float | None = None
    second_high: float | None = None
    correct: bool = False
    """At least one design passed every check."""
    designs: int = 0
    valid: int = 0
    device_s: float = 0.0
    """Evaluation worker seconds, on whatever device evaluated."""
    note: str | None = None
    """The run's stop reason, or why the problem failed or was skipped."""
    domain: str | None = None
    """The problem's domain (None: no run yet)."""
    evaluations: int = 0
    """Every evaluation record of the run (designs and baselines)."""
    span: tuple[float, float] | None = None
    """The run's start and its last record (Unix seconds)."""
    active_s: float | None = None
    """Seconds it ran (a suite's manifest: summed over sessions, never the gaps); None: the span's length."""
    sessions: tuple[tuple[float, float], ...] = ()
    """Its suite's sessions (the suite's wall time; empty for a run given by hand)."""
    untimed: bool = False
    """A suite's problem whose running time no session recorded (it ran before the suite kept
    sessions): counted in neither the wall nor the evaluation rates."""

    @property
    def wall_s(self) -> float | None:
        if self.active_s is not None:
            return self.active_s
        return None if self.span is None else self.span[1] - self.span[0]
    slots: frozenset[str] = frozenset()
    """The devices its evaluations ran on (`host/physical device`)."""
    rules: tuple[tuple[str, bool], ...] = ()
    """The best design's verdicts under the benchmarks' own correctness rules, where the domain
    records them (PyTorch: `kernelbench`, `pike`), so a suite compares with published numbers."""

    def to_json(self, names: BaselineNames | None = None) -> dict[str, Any]:
        """The row as `bench --json` gives it, its keys in the words of `names` (None: its
        own domain's): `speedup_<compared>`, `beats_<reference>` (`speedup_compile`,
        `beats_eager` for PyTorch)."""
        n = names or names_of(self.domain)
        second = {} if not n.compared else {
            f"speedup_{n.compared}": self.second,
            f"speedup_{n.compared}_ci": None if self.second_low is None or self.second_high is None
            else [self.second_low, self.second_high]}
        return {"key": self.key or self.problem, "problem": self.problem, "state": self.state,
                "run_dir": str(self.run_dir) if self.run_dir is not None else None, "policy": self.policy,
                "best": self.best_id, "correct": self.correct, "designs": self.designs, "valid": self.valid,
                "speedup": self.speedup,
                "speedup_ci": None if self.low is None or self.high is None else [self.low, self.high],
                **second, f"beats_{n.reference.replace(' ', '_')}": self.beats, "queries": self.queries,
                "usd": self.usd, "device_s": self.device_s, "evaluations": self.evaluations,
                "wall_s": None if self.wall_s is None else round(self.wall_s, 3), "note": self.note,
                "best_under_rules": dict(self.rules)}


def row_of(run_dir: Path, key: str = "", state: str = "done", note: str | None = None) -> ProblemRow:
    """A run directory's row (read only)."""
    data = load_run(run_dir)
    head = headline_of(data.views, data.names)  # the run's result, as every view says it
    b, r = head.top, head.ratios
    ref, sec = (r.reference, r.compared) if r is not None else (None, None)
    spend = data.spend
    stop = data.run.stop_reason if data.run else None
    return ProblemRow(run_dir, data.problem, data.run.policy if data.run else "?",
                      ref.ratio if ref else None, ref.low if ref else None, ref.high if ref else None,
                      sec.cell() if sec else "-", head.best is not None, spend.queries, spend.usd,
                      key=key or data.problem, state=state, best_id=b.id if b else None,
                      second=sec.ratio if sec else None, second_low=sec.low if sec else None,
                      second_high=sec.high if sec else None, correct=any(passed(v) for v in data.views),
                      designs=len(data.views), valid=sum(1 for v in data.views if passed(v)),
                      device_s=spend.gpu_seconds, note=note or stop,
                      domain=data.domain if data.problem_source else None,  # no problem stored yet: no domain
                      evaluations=len(data.evaluations),
                      span=(data.run.created_at, data.run.updated_at) if data.run else None,
                      slots=frozenset(_slot(e.environment, e.device) for e in data.evaluations),
                      rules=_rules_of(data.evaluations, b.id if b else None))


def _rules_of(evaluations: Sequence[Any], design_id: str | None) -> tuple[tuple[str, bool], ...]:
    """The verdicts of the benchmarks' rules in `design_id`'s latest evaluation (its validators'
    `benchmarks` details: name -> {ok, ...}), sorted by name."""
    ev = next((e for e in reversed(list(evaluations)) if e.design_id == design_id), None)
    found: dict[str, bool] = {}
    for v in (ev.validators if ev is not None else ()):
        for name, verdict in mapping(mapping(v.get("details")).get("benchmarks")).items():
            if isinstance(verdict, dict) and isinstance(verdict.get("ok"), bool):
                found[str(name)] = verdict["ok"]
    return tuple(sorted(found.items()))


def _slot(environment: dict[str, Any], device: str) -> str:
    """Where an evaluation ran: its worker's host and physical device."""
    return f"{environment.get('host') or environment.get('hostname') or '?'}/{environment.get('physical_device') or device}"


def union_s(spans: Sequence[tuple[float, float]]) -> float:
    """The length of the union of time intervals (seconds)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


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
            running = time.time() - e.started_at if e.state == "running" and e.started_at else 0.0
            row = row_of(d, key=e.key, state=e.state, note=e.stop_reason)
            # a problem whose records were made in no recorded session (a suite begun before
            # sessions were kept) has no known running time: None, never 0 s
            untimed = bool(manifest.sessions) and e.active_s + running <= 0 and row.evaluations > 0
            out.append(dataclasses.replace(row, active_s=e.active_s + running if manifest.sessions and not untimed
                                           else None, sessions=manifest.sessions, untimed=untimed))
        else:
            out.append(ProblemRow(None, Path(e.path).stem if e.path.endswith(".py") else Path(e.path).name,
                                  policy, None, None, None, "-", False, 0, 0.0, key=e.key, state=e.state,
                                  note=e.stop_reason))
    return out


def faster_than(ratio: float | None, low: float | None, p: float) -> bool:
    """Faster than p times a baseline by more than the measurement's interval: its low end above
    p (p = 0: measured at all); a ratio without an interval counts by itself."""
    if ratio is None:
        return False
    return (low if low is not None and p > 0 else ratio) > p


def fast_p(rows: Sequence[ProblemRow], p: float, over: str | None = None) -> float:
    """The share of problems whose best design is correct and faster than p x the reference by
    more than its interval (p = 0: correct at all); `over` (the compared baseline's name, or the
    reference's): than p x that baseline."""
    if not rows:
        return 0.0
    if over is None or over == suite_names(rows).reference:
        return sum(faster_than(r.speedup, r.low, p) for r in rows) / len(rows)
    return _fast_second(rows, p)


def suite_names(rows: Sequence[ProblemRow]) -> BaselineNames:
    """The words of the rows' domain (the domain-free ones when they have none or several:
    `names_of`)."""
    domains = {r.domain for r in rows if r.domain}
    return names_of(domains.pop() if len(domains) == 1 else None)


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def counted(rows: Sequence[ProblemRow]) -> list[ProblemRow]:
    """The rows the summaries count (not pending, not skipped)."""
    return [r for r in rows if r.state not in NOT_COUNTED]


def summary(rows: Sequence[ProblemRow], names: BaselineNames | None = None) -> dict[str, float | None]:
    """The suite's summaries, each key described in `labels(names)` (rates in [0, 1], ratios
    as x; `names`: the rows' own, `suite_names`)."""
    c = (names or suite_names(rows)).compared
    all_rows = list(rows)
    rows = counted(all_rows)
    n = len(rows)
    ref = [r.speedup for r in rows if r.speedup is not None]
    sec = [r.second for r in rows if r.second is not None]
    out: dict[str, float | None] = {"problems": len(all_rows), "counted": n}
    out.update({f"fast_{p:g}": fast_p(rows, p) for p in FAST_P})
    if c:
        out.update({f"fast_{p:g}_{c}": _fast_second(rows, p) for p in FAST_P})
    out.update(
        correct_rate=sum(1 for r in rows if r.correct) / n if n else 0.0,
        geomean_measured=geomean(ref), geomean_excluded=n - len(ref),
        geomean_clamped=geomean([max(1.0, r.speedup) if r.speedup is not None else 1.0 for r in rows]))
    if c:
        out.update({
            f"geomean_{c}_measured": geomean(sec), f"geomean_{c}_excluded": n - len(sec),
            f"geomean_{c}_clamped": geomean([max(1.0, r.second) if r.second is not None else 1.0
                                             for r in rows if r.speedup is None or r.second is not None])})
    out.update(
        queries_per_problem=sum(r.queries for r in rows) / n if n else None,
        usd_per_problem=sum(r.usd for r in rows) / n if n else None,
        device_s_per_problem=sum(r.device_s for r in rows) / n if n else None,
    )
    # the suite's wall: its sessions (runs given by hand: their own spans), overlaps counted once;
    # a suite's problem with no recorded running time counts in neither the wall nor the rate
    timed = [r for r in rows if not r.untimed]
    spans = [x for r in timed for x in (r.sessions or ((r.span,) if r.span is not None else ()))]
    walls = [w for w in (r.wall_s for r in timed) if w is not None]
    evaluations = sum(r.evaluations for r in timed)
    gpus = len(frozenset().union(*(r.slots for r in timed)))
    wall_s = union_s(spans)
    device_s = sum(r.device_s for r in rows)
    out.update(
        wall_s_per_problem=sum(walls) / len(walls) if walls else None,
        evaluations_per_gpu_hour=evaluations * 3600 / (wall_s * gpus) if wall_s > 0 and gpus else None,
        evaluations_per_device_hour=sum(r.evaluations for r in rows) * 3600 / device_s if device_s > 0 else None,
        untimed_problems=len(rows) - len(timed),
    )
    return out


def _fast_second(rows: Sequence[ProblemRow], p: float) -> float:
    """fast_p over the compared baseline."""
    return sum(faster_than(r.second, r.second_low, p) for r in rows) / len(rows) if rows else 0.0


def suite_json(rows: Sequence[ProblemRow]) -> dict[str, Any]:
    """`bench --json`'s results: the summaries, what each means, and every problem's row."""
    n = suite_names(rows)
    return {"summary": summary(rows, n), "labels": labels(n), "problems": [r.to_json(n) for r in rows]}


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _with_ci(x: float | None, lo: float | None, hi: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "")


def summary_lines(s: dict[str, float | None], names: BaselineNames) -> list[tuple[str, str]]:
    """The summaries as (label, value) pairs, in the order the page and the console give them
    (`names`: the words of `s`'s keys; the compared baseline's lines only where `s` has them)."""
    n = names
    lab, c = labels(n), n.compared if n.compared and f"fast_1_{n.compared}" in s else None
    out = [(lab[f"fast_{p:g}"].split(": ", 1)[0] + f" (correct and > {p:g}x {n.reference})", _pct(s[f"fast_{p:g}"]))
           for p in FAST_P]
    if c:
        out += [(lab[f"fast_{p:g}_{c}"].split(": ", 1)[0], _pct(s[f"fast_{p:g}_{c}"])) for p in FAST_P]
    out += [(lab["correct_rate"], _pct(s["correct_rate"]))]
    for k in ("geomean_measured", "geomean_clamped", *((f"geomean_{c}_measured", f"geomean_{c}_clamped") if c else ())):
        out.append((lab[k], _ratio(s[k])))
    out += [(lab["geomean_excluded"], f"{s['geomean_excluded']:g}")]
    if c:
        out += [(lab[f"geomean_{c}_excluded"], f"{s[f'geomean_{c}_excluded']:g}")]
    out += [(lab["counted"], f"{s['counted']:g} of {s['problems']:g}")]
    for k, fmt in (("queries_per_problem", "{:.1f}"), ("usd_per_problem", "{:.3g}"), ("device_s_per_problem", "{:.1f}"),
                   ("wall_s_per_problem", "{:.1f}"), ("evaluations_per_gpu_hour", "{:.0f}"),
                   ("evaluations_per_device_hour", "{:.0f}")):
        v = s[k]
        out.append((lab[k], "-" if v is None else fmt.format(v)))
    if s.get("untimed_problems"):
        out.append((lab["untimed_problems"], f"{s['untimed_problems']:g}"))
    return out


def problem_table_rows(rows: Sequence[ProblemRow]) -> list[tuple[str, ...]]:
    return [(r.key or r.problem, r.state, r.policy, (r.best_id or "-")[:12], _with_ci(r.speedup, r.low, r.high),
             r.second_text if r.second_text != "-" else _with_ci(r.second, r.second_low, r.second_high),
             "yes" if r.correct else "no", "yes" if r.beats else "no",
             ", ".join(f"{k} {'pass' if ok else 'FAIL'}" for k, ok in r.rules) or "-", str(r.queries), f"{r.usd:.3g}",
             f"{r.device_s:.1f}", str(r.run_dir or "-")) for r in rows]


def problem_header(names: BaselineNames) -> list[str]:
    """The problem table's header, in the words of the problems' domain."""
    r = names.reference
    return ["problem", "state", "policy", "best design", f"best vs {r} [95% CI]",
            f"vs {names.compared or '-'} [95% CI], chained via {r}", "correct", f"beats {r}",
            "best under the benchmarks' own correctness rules (docs/correctness.md)",
            "queries", "USD",
            "device s", "run"]


def build_suite_page(rows: Sequence[ProblemRow]) -> str:
    n = suite_names(rows)
    s = summary(rows, n)
    table = _table(problem_header(n), problem_table_rows(rows))
    summ = _table(["summary", "value"], summary_lines(s, n))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>stratagem suite</title><style>{CSS}</style>"
            f"</head><body><h1>stratagem · {len(rows)} problem{'' if len(rows) == 1 else 's'}</h1><p class=muted>generated {stamp}; speedups are "
            f"paired (timed beside {n.reference} in each design's worker)</p><h2>Summary</h2>{summ}"
            f"<h2>Problems</h2>{table}</body></html>")


def build_suite(run_dirs: Sequence[Path]) -> str:
    """The suite page over run directories (a suite directory stands for its problems)."""
    return build_suite_page(rows_of(run_dirs))


def write_suite(run_dirs: Sequence[Path], out: Path) -> Path:
    out.write_text(build_suite(run_dirs), encoding="utf-8")
    return out
