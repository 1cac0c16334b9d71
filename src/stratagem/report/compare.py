"""Owns `stratagem compare`: several runs of one problem side by side, at equal budgets.

Runs are of one problem when their problems have the same content (the source's hash), whatever
their folders or files are called. For each run, the best paired speedup over the reference
found so far (as `show` gives it: valid, stably timed designs only; the reference as the
problem's domain names it) is followed against the LLM queries spent and against money: one
step curve (`RunCurve.curve`) that the JSON lists and the plot draws, each design's own ratio
kept apart (`designs` in the JSON). Before its first valid design a run stands at 1.00x (no
design falls back to the reference, as PIKE's scoring does). The area
under each curve is taken over the budget every run reached (the smallest total), divided by
that budget: the mean best speedup over it, so policies and models compare at equal budgets,
whatever each run was given. Money is compared only when every run's calls were priced; the
money panel says when they were not. Runs are read without writing into them
(`RunStore.read`). The table is a rich Table; the plot a PNG (matplotlib, imported only when a
plot is asked for).

A run whose designs carry template parameters (the `tune` policy, docs/tune.md) also gets its
study compared (`tuning_table`, `tuning` in the JSON): the points tried and how many passed, the
best point and its parameters, and, in a run where agents wrote designs too, how much of the
best came from each (`tune.shares`, as the report's Tuning section says it).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from stratagem.core.search import DesignView, ranked, ratio_text
from stratagem.domains import names_of
from stratagem.errors import ConfigError
from stratagem.search import state as st
from stratagem.search.headline import headline_of, ratios_of
from stratagem.search.policies.tune import Shares, Tuning, point_text, shares, tuning
from stratagem.store.sqlite import RunStore


@dataclass(frozen=True)
class Point:
    queries: int
    usd: float
    speedup: float
    """One design's own paired speedup, once this many queries (and dollars) were spent."""
    design_id: str = ""


@dataclass(frozen=True)
class Step:
    queries: int
    usd: float
    best: float
    """The best speedup so far, from this point of the spend on (1.00x before any design)."""


@dataclass(frozen=True)
class RunCurve:
    run_dir: Path
    problem: str
    policy: str
    model: str
    queries: int
    usd: float
    priced: bool
    """Every call of the run had a known price."""
    points: tuple[Point, ...]
    """Each ranked design at its own speedup, in the order they were made."""
    best: DesignView | None = None
    problem_id: str = ""
    """The content hash of the problem's source: runs compare when theirs agree."""
    any_priced: bool = False
    """Some call of the run had a known price."""
    tuning: Tuning | None = None
    """The run's tune study (None: no design carries parameters)."""
    shares: Shares | None = None
    """Where the best came from, in a run mixing tuning and designs written otherwise."""
    domain: str | None = None
    """The problem's domain (None: unknown, the default domain's words)."""

    def tuning_json(self) -> dict[str, Any] | None:
        """The study as the JSON gives it: points tried, how many passed, the best point, the
        objective per parameter value, and the shares (None without a study)."""
        if self.tuning is None:
            return None
        t = self.tuning
        return {"points_tried": len(t.points), "passed": sum(p.speedup is not None for p in t.points),
                **t.to_json(), "shares": self.shares.to_json() if self.shares else None}

    def curve(self) -> list[Step]:
        """The best-so-far step curve the JSON lists and the plot draws: 1.00x at no spend, a
        step where a design beat the best so far, and the run's whole spend at the end."""
        steps = [Step(0, 0.0, 1.0)]
        for p in self.points:
            if p.speedup > steps[-1].best:
                steps.append(Step(p.queries, p.usd, p.speedup))
        end = max(self.queries, steps[-1].queries)
        steps.append(Step(end, max(self.usd, steps[-1].usd), steps[-1].best))
        return steps

    def best_at(self, x: float, axis: str) -> float:
        """The best speedup once `x` queries (`axis="queries"`) or dollars were spent."""
        best = 1.0
        for p in self.points:
            if (p.queries if axis == "queries" else p.usd) <= x + 1e-12:
                best = max(best, p.speedup)
        return best

    def area(self, budget: float, axis: str) -> float | None:
        """The mean best speedup over [0, budget] (the area under the step curve / budget)."""
        if budget <= 0:
            return None
        xs = sorted({0.0, *(float(p.queries if axis == "queries" else p.usd) for p in self.points)})
        xs = [x for x in xs if x < budget] + [budget]
        total = sum(self.best_at(a, axis) * (b - a) for a, b in zip(xs, xs[1:], strict=False))
        return total / budget


def load_curve(run_dir: str | Path) -> RunCurve:
    """One run's best-so-far curve from its database.

    Raises:
        ConfigError: not a run directory.
    """
    d = Path(run_dir)
    if not (d / RunStore.DB_NAME).is_file():
        raise ConfigError(f"{d}: not a run directory (no {RunStore.DB_NAME}); pass directories made by `stratagem run`")
    with RunStore.read(d) as store:
        run = store.run()
        problems = store.problems()
        calls = sorted(store.agent_calls(), key=lambda c: c.created_at)
        designs = {r.id: r for r in store.designs()}
        views = st.stored_views(store, list(designs.values()))
    cfg = run.config if run is not None else {}
    model = str((cfg.get("agents") or {}).get("model") or "-")
    created = {v.id: designs[v.id].created_at for v in views if v.id in designs}
    points = []
    for v in sorted(ranked(views), key=lambda v: created.get(v.id, 0.0)):
        t = created.get(v.id, 0.0)
        spent = [c for c in calls if c.created_at <= t]
        points.append(Point(sum(c.requests for c in spent), sum(c.cost_usd or 0.0 for c in spent),
                            float(v.speedup or 1.0), v.id))
    problem = next((p for p in problems if run is not None and p.id == run.problem_id), problems[0] if problems else None)
    billed = [c for c in calls if c.requests]
    study = tuning(views)
    return RunCurve(
        run_dir=d, problem=problem.name if problem else "?", policy=run.policy if run else "?", model=model,
        queries=sum(c.requests for c in calls), usd=sum(c.cost_usd or 0.0 for c in calls),
        priced=all(c.cost_usd is not None for c in billed), points=tuple(points),
        best=st.best_of(views), problem_id=problem.id if problem else "",
        any_priced=any(c.cost_usd is not None for c in billed),
        tuning=study, shares=shares(views, study) if study is not None else None,
        domain=problem.domain if problem else None,
    )


@dataclass(frozen=True)
class Comparison:
    curves: tuple[RunCurve, ...]
    query_budget: int
    """The budget every run reached (the smallest total): the areas are taken over it."""
    usd_budget: float | None
    """The same for money; None when some run's calls were not all priced or cost nothing."""

    def area(self, c: RunCurve, axis: str) -> float | None:
        budget = self.query_budget if axis == "queries" else self.usd_budget
        return c.area(float(budget), axis) if budget else None

    @property
    def problem(self) -> str:
        """The problem's name; its other names when the runs' files were named differently."""
        names = list(dict.fromkeys(c.problem for c in self.curves))
        return names[0] + (f" (also named {', '.join(names[1:])})" if len(names) > 1 else "") if names else "?"

    @property
    def reference(self) -> str:
        """The reference as the runs' domain names it (`BaselineNames.reference`)."""
        return names_of(self.curves[0].domain if self.curves else None).reference

    def money_note(self) -> str:
        """Why money is not compared ('' when it is)."""
        if self.usd_budget:
            return ""
        if not any(c.queries for c in self.curves):
            return "no LLM queries: nothing was spent"
        if not any(c.any_priced for c in self.curves):
            return "unpriced: no call has a known price, so money cannot be compared"
        if not all(c.priced for c in self.curves):
            return "not every call was priced, so money is not compared"
        return "no money was spent"

    def to_json(self) -> dict[str, Any]:
        return {"problem": self.curves[0].problem if self.curves else None,
                "problem_names": list(dict.fromkeys(c.problem for c in self.curves)),
                "problem_id": self.curves[0].problem_id if self.curves else None,
                "query_budget": self.query_budget, "usd_budget": self.usd_budget,
                "money_note": self.money_note() or None,
                "runs": [{"run_dir": str(c.run_dir), "problem": c.problem, "policy": c.policy, "model": c.model,
                          "queries": c.queries, "usd": c.usd, "priced": c.priced,
                          "best_speedup": c.best.speedup if c.best else None,
                          "best_low": c.best.speedup_low if c.best else None,
                          "best_high": c.best.speedup_high if c.best else None,
                          "headline": headline_of([c.best] if c.best else [], names_of(c.domain)).to_json(),
                          "area_queries": self.area(c, "queries"), "area_usd": self.area(c, "usd"),
                          "curve": [{"queries": p.queries, "usd": p.usd, "best_speedup": p.best} for p in c.curve()],
                          "designs": [{"design_id": p.design_id, "queries": p.queries, "usd": p.usd,
                                       "speedup": p.speedup} for p in c.points],
                          "tuning": c.tuning_json()}
                         for c in self.curves]}


def compare_runs(run_dirs: Sequence[str | Path]) -> Comparison:
    """Runs of one problem, compared.

    Raises:
        ConfigError: no run, a directory that is not a run, or runs of different problems.
    """
    if not run_dirs:
        raise ConfigError("compare: pass at least one RUN_DIR")
    curves = tuple(load_curve(d) for d in run_dirs)
    if len({c.problem_id for c in curves}) > 1:
        which = ", ".join(f"{c.run_dir}: {c.problem} ({c.problem_id[:12]})" for c in curves)
        raise ConfigError(f"compare: the runs are of different problems (their sources differ: {which}); "
                          "compare runs of one problem")
    qb = min(c.queries for c in curves)
    usd = min(c.usd for c in curves) if all(c.priced for c in curves) else None
    return Comparison(curves, qb, usd if usd else None)


def table(cmp: Comparison) -> Table:
    t = Table(title=f"{cmp.problem}: best paired speedup vs {cmp.reference} at equal budgets")
    for col in ("run", "policy", "model", "queries", "USD", "best", f"mean best @ {cmp.query_budget} queries",
                f"mean best @ ${cmp.usd_budget:.3g}" if cmp.usd_budget else "mean best @ $ (not all priced)"):
        t.add_column(col, justify="right" if col not in ("run", "policy", "model") else "left")
    for c in cmp.curves:
        aq, au = cmp.area(c, "queries"), cmp.area(c, "usd")
        t.add_row(str(c.run_dir), c.policy, c.model, str(c.queries), f"{c.usd:.3g}" if c.priced else "unpriced",
                  _best_text(c), f"{ratio_text(aq)}x" if aq is not None else "-",
                  f"{ratio_text(au)}x" if au is not None else "-")
    return t


def _best_text(c: RunCurve) -> str:
    """A run's best as its headline says it: the confirmed ratio with `c` when the run confirmed it
    (`search/headline.py`); the curves are search-time figures, as the search saw them."""
    if c.best is None:
        return "-"
    return ratios_of(c.best, names_of(c.domain)).reference.cell()


def tuning_table(cmp: Comparison) -> Table | None:
    """The runs' tune studies side by side (None when no run tuned): points tried and passed, the
    best point and its parameters, its speedup, and where each run's best came from."""
    if not any(c.tuning for c in cmp.curves):
        return None
    t = Table(title=f"{cmp.problem}: tuning (docs/tune.md)")
    for col in ("run", "policy", "points tried", "passed", "best point", "best tuned", "the run's best came from"):
        t.add_column(col, justify="right" if col in ("points tried", "passed", "best tuned") else "left")
    for c in cmp.curves:
        s = c.tuning
        if s is None:
            t.add_row(str(c.run_dir), c.policy, "0", "-", "-", "-", "no tuning")
            continue
        best = s.best
        if c.shares is not None:
            sh = c.shares
            factor = f", {sh.tuner_factor:.3g}x the written best" if sh.tuner_factor is not None else ""
            origin = (f"the tuner{factor}" if sh.from_tuner else
                      f"{sh.best_author or 'a written design'}{factor}") + f" ({sh.tuned} tuned, {sh.written} written)"
        else:
            origin = "the tuner (no design written otherwise passed)" if best else "no ranked point"
        t.add_row(str(c.run_dir), c.policy, str(len(s.points)), str(sum(p.speedup is not None for p in s.points)),
                  point_text(best.point) if best else "-",
                  f"{best.speedup:.3g}x" if best and best.speedup is not None else "-", origin)
    return t


def figure(cmp: Comparison) -> Any:
    """The best-so-far curves (`RunCurve.curve`, as the JSON lists them) against queries and
    against money; the money panel says why it is empty when money is not compared."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stratagem.report.figures import count_axis

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, ax in zip(("queries", "usd"), axes, strict=True):
        every: list[float] = []
        for c in cmp.curves:
            if axis == "usd" and not c.priced:
                continue  # an unpriced run has no money curve (its $0 would be a lie)
            steps = c.curve()
            xs = [float(p.queries if axis == "queries" else p.usd) for p in steps]
            every += xs
            ax.step(xs, [p.best for p in steps], where="post", label=f"{c.policy} ({c.model}) {c.run_dir.name}")
        budget = cmp.query_budget if axis == "queries" else cmp.usd_budget
        if budget:
            ax.axvline(budget, color="grey", linestyle=":", linewidth=1)
        if axis == "queries":
            count_axis(ax, every)  # whole queries, and a sensible window when no run asked any
        elif max(every, default=0.0) == 0.0:
            ax.set_xlim(0.0, 1.0)
        ax.set_xlabel("LLM queries" if axis == "queries" else "USD")
        ax.set_ylabel(f"best speedup vs {cmp.reference} (paired)")
        ax.grid(alpha=0.3)
    note = cmp.money_note()
    if note:
        axes[1].set_title(f"money: {note.split(',')[0]}", fontsize=9)
        axes[1].text(0.5, 0.5, textwrap.fill(note, 40), transform=axes[1].transAxes, ha="center", va="center",
                     fontsize=10, color="dimgrey")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{cmp.problem}: best speedup at equal budgets")
    fig.tight_layout()
    return fig


def plot(cmp: Comparison, path: Path) -> Path:
    """`figure` as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = figure(cmp)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def dumps(cmp: Comparison) -> str:
    return json.dumps(cmp.to_json(), indent=2)
