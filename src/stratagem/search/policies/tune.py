"""Owns the `tune` policy: Bayesian optimization of a template's parameters (no LLM).

The template (`core/template.py`, docs/tune.md) is a design file that declares its parameters,
their space and the constraints between them. Each iteration proposes one point with optuna's
TPE sampler (multivariate, suited to mixed integer and categorical spaces), renders it, and
evaluates the rendered design through the Session like any other design (static checks,
correctness, integrity, paired timing). optuna's view of the space (a `pow2` by its exponent)
is `search/policies/surrogate.py`'s, which the BO alignment analysis shares. The objective is
the paired speedup over the reference, maximized.

- Failed and invalid points are told to the study as the penalty value (`[policies.tune]
  penalty`, 0.0: worse than any measured point), not as optuna's FAIL state: TPE ignores failed
  trials, so it would propose a point it knows to fail again.
- A point that violates a constraint is never rendered nor evaluated: it is told as the
  penalty (so the sampler learns the region is bad), kept in the policy's state, and another
  point is drawn. A point already evaluated is told its known value and another is drawn.
  After `draws` draws without a new feasible point, an untried feasible point is taken at
  random (spaces small enough to list), or the study stops.
- The study is rebuilt at every iteration from the run database: every design tagged with this
  template's id and its `params`, with its stored verdict, plus the saved constraint violations
  (optuna's `create_trial`/`add_trial`), and the sampler is seeded with `seed + trials`. So a
  killed run resumes the study where it stopped, never evaluates a point twice, and a run is a
  function of its seed and its measurements.
- Budgets: one point per iteration, so `search.iterations` is the evaluation budget; the run's
  device-seconds and wall budgets stop it as they stop any policy.
"""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratagem.core.design import FILE_MARKER, text_files
from stratagem.core.problem import Problem
from stratagem.core.search import (
    MEASURED,
    DesignView,
    IterationResult,
    Plan,
    Review,
    SearchState,
    Session,
    ranked,
)
from stratagem.core.template import (
    ENUMERATE_MAX,
    Point,
    Template,
    TemplateError,
    Value,
    is_template,
    parse_template,
)
from stratagem.domains import get_domain
from stratagem.errors import ConfigError, import_extra
from stratagem.search.policies.registry import TuneSettings
from stratagem.search.policies.surrogate import decode, distributions, encode

TAG_PARAMS = "params"
"""The tag holding a design's parameter values (name -> value)."""
TAG_TEMPLATE = "template"
"""The tag holding the id (content hash) of the template a design was rendered from."""
TAG_HANDOFF = "handoff"
"""The tag of a point tuned from an agent's template (`search/policies/handoff.py`): `author`
(who wrote the template), `point` (its number in that hand-off, from 1), `of` (the points given)."""
TAG_POINTS = "tuned_points"
"""The tag on a hand-off's best point: every point of its template the study knows, each
`{params, status, speedup, design}`, so every prompt that shows the point shows them all
(`context/designs.tuned_lines`)."""
STATE_TEMPLATE = "template"
"""The policy state holding the template's files (a resumed run uses these)."""
STATE_INFEASIBLE = "infeasible"
"""The policy state holding the points drawn that violate a constraint (never evaluated)."""
TUNED_POINT = "tuned point"
"""The label (stored strategy) of every point of a template, the `tune` policy's and a
hand-off's (`handoff.py`): how the design was made."""
STATUS_WORKER = "tune"


@dataclass(frozen=True)
class Trial:
    """One point the study knows about."""

    point: Point
    value: float
    """The paired speedup over the reference, or the penalty."""
    status: str
    """The design's status (`valid`, `invalid`, ...), or `infeasible` (a constraint violated)."""
    design_id: str | None = None


def key(point: Mapping[str, Value]) -> str:
    """A point's identity (its values in name order)."""
    return json.dumps(dict(point), sort_keys=True)


def point_text(point: Mapping[str, Value]) -> str:
    """`BLOCK=64, IMPL=loop`."""
    return ", ".join(f"{k}={v}" for k, v in point.items())


def history(template: Template, designs: Sequence[DesignView], infeasible: Sequence[Mapping[str, Any]],
            penalty: float) -> list[Trial]:
    """What the study knows: each evaluated design of this template (oldest first) with its
    speedup when the harness passed and timed it, else the penalty; then each point that
    violated a constraint, at the penalty."""
    out: list[Trial] = []
    seen: set[str] = set()
    for d in designs:
        point = _point_of(template, d)
        if point is None or key(point) in seen:
            continue
        seen.add(key(point))
        value = d.speedup if d.status in MEASURED and d.speedup is not None else penalty
        out.append(Trial(point, float(value), d.status, d.id))
    for raw in infeasible:
        point = dict(raw)
        if key(point) not in seen and _in_space(template, point):
            seen.add(key(point))
            out.append(Trial(point, penalty, "infeasible"))
    return out


def _point_of(template: Template, d: DesignView) -> Point | None:
    if d.tags.get(TAG_TEMPLATE) != template.id:
        return None
    raw = d.tags.get(TAG_PARAMS)
    if not isinstance(raw, dict):
        return None
    point: Point = {str(k): v for k, v in raw.items() if isinstance(v, int | float | str)}
    return point if _in_space(template, point) else None


def _in_space(template: Template, point: Mapping[str, Value]) -> bool:
    return set(point) == set(template.names) and all(point[p.name] in p.values for p in template.params)


@dataclass(frozen=True)
class Proposal:
    """What one iteration's sampling decided."""

    point: Point | None
    """The point to evaluate (None: the study has nothing new to propose)."""
    how: str
    """How it was chosen, or why there is none."""
    infeasible: tuple[Point, ...] = ()
    """Points drawn that violate a constraint (never rendered)."""


class TunePolicy:
    """One point of the template's space per iteration, chosen by TPE from every earlier one."""

    name = "tune"

    def __init__(self, template: Template | None, settings: TuneSettings, seed: int,
                 missing: str | None = None) -> None:
        """`template`: None when its file is missing (`missing` names it): a resumed run then
        uses the template stored in its database."""
        import_extra("optuna", "tune", "--policy tune")  # a missing extra said with its pip command
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per trial
        self.template = template
        self.settings = settings
        self.seed = settings.seed if settings.seed is not None else seed
        self.missing = missing

    @classmethod
    def from_settings(cls, settings: TuneSettings, problem: Problem, seed: int) -> TunePolicy:
        """The policy `[policies.tune]` describes. The template is `design`: a file (the
        problem's main file: PyTorch's `candidate.py`, a command problem's first editable
        file) or a directory of design files (a command problem's editable files); without
        one, the problem's reference when it declares parameters (`reference_template`).

        Raises:
            ConfigError: no template given and the reference declares none, or a template
                that cannot be read (its file and line named; `TemplateError`).
        """
        if settings.design is None:
            own = reference_template(problem)
            if own is None:
                raise ConfigError("the tune policy needs a template: a design that declares its parameters, passed "
                                  "with --design FILE (or DIR: a command problem's editable files), or a reference "
                                  "that declares them (docs/tune.md)")
            return cls(own, settings, seed)
        path = Path(settings.design)
        if not path.exists():
            return cls(None, settings, seed, missing=str(path))
        files = read_template_files(path, get_domain(problem.domain).main_file(problem))
        try:
            return cls(parse_template(files), settings, seed)
        except TemplateError as e:
            shown = str(path / e.file) if path.is_dir() and e.file else str(path)
            raise TemplateError(e.reason, shown, e.line) from None

    # -- decisions ----------------------------------------------------------------------------

    def propose(self, template: Template, trials: Sequence[Trial]) -> Proposal:
        """The next point: TPE's, drawn again past constraint violations and repeats; else an
        untried feasible point at random; else none. A function of the trials and the seed."""
        import optuna

        seen = {key(t.point): t.value for t in trials}
        untried: list[Point] | None = None
        if template.size <= ENUMERATE_MAX:
            untried = [p for p in template.points() if key(p) not in seen]
            if not untried:
                return Proposal(None, f"every feasible point of the space ({len(seen)} known) is evaluated")
        dists = distributions(template)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=self.seed + len(trials), multivariate=True,
                                                 n_startup_trials=self.settings.startup)
            study = optuna.create_study(direction="maximize", sampler=sampler)
            for t in trials:
                study.add_trial(optuna.trial.create_trial(params=encode(template, t.point), distributions=dists,
                                                          value=t.value, user_attrs={"status": t.status}))
            infeasible: dict[str, Point] = {}
            for _ in range(self.settings.draws):
                trial = study.ask(dists)
                point = decode(template, trial.params)
                k = key(point)
                if template.violations(point):
                    infeasible.setdefault(k, point)
                    study.tell(trial, self.settings.penalty)
                elif k in seen:
                    study.tell(trial, seen[k])
                else:
                    how = "at random (startup)" if len(trials) < self.settings.startup else "by TPE"
                    return Proposal(point, how, tuple(infeasible.values()))
        if untried:
            rng = random.Random(self.seed + len(trials))
            return Proposal(rng.choice(untried), f"at random among the {len(untried)} untried points (TPE drew no "
                            f"new feasible point in {self.settings.draws} draws)", tuple(infeasible.values()))
        return Proposal(None, f"no new feasible point in {self.settings.draws} draws", tuple(infeasible.values()))

    # -- the Policy protocol --------------------------------------------------------------------

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        """Propose one point, render it, evaluate it through the session."""
        template = self._template(session)
        saved = session.load_state(STATE_INFEASIBLE)
        infeasible: list[dict[str, Any]] = list(saved) if isinstance(saved, list) else []
        trials = history(template, state.designs, infeasible, self.settings.penalty)
        exhausted = session.budget_left()
        if exhausted is not None:
            return IterationResult(plan=None, note=f"the {exhausted} budget is spent")
        session.set_status(STATUS_WORKER, f"sampling point {len(trials) + 1}")
        proposal = self.propose(template, trials)
        if proposal.infeasible:
            session.save_state(STATE_INFEASIBLE, infeasible + [dict(p) for p in proposal.infeasible])
        if proposal.point is None:
            return IterationResult(plan=None, exhausted=True, note=proposal.how)
        point = proposal.point
        # never a violating point (propose checked it); one text and the other files, as a writer gives them
        text, files = design_text(template.render(point), get_domain(state.problem.domain).main_file(state.problem))
        session.set_status(STATUS_WORKER, f"evaluating {point_text(point)}")
        best = max((t for t in trials if t.design_id is not None and t.status in MEASURED),
                   key=lambda t: t.value, default=None)
        plan = Plan(strategy="tune", evidence=(best.design_id,) if best and best.design_id else (),
                    rationale=f"point {len(trials) + 1} of the template {template.id[:10]}, chosen {proposal.how}"
                    + (f"; {len(proposal.infeasible)} drawn points violated a constraint" if proposal.infeasible else ""),
                    instructions=point_text(point))
        fb = await session.evaluate(text, strategy=TUNED_POINT, author="tune", files=files or None,
                                    tags={TAG_PARAMS: dict(point), TAG_TEMPLATE: template.id})
        shown = f" {fb.speedup:.3g}x" if fb.speedup is not None else ""
        return IterationResult(plan=plan, design_ids=(fb.design_id,), note=f"{point_text(point)}: {fb.status}{shown}")

    async def review(self, design: DesignView, state: SearchState, session: Session) -> Review | None:
        """No reviewer: every point is a rendering of one template the harness checks anyway."""
        return None

    def _template(self, session: Session) -> Template:
        """The run's template: the one stored in its database when there is one (a resume),
        else the given one, stored now.

        Raises:
            ConfigError: neither exists (the template file is missing).
        """
        stored = session.load_state(STATE_TEMPLATE)
        if isinstance(stored, dict) and stored:
            return parse_template({str(k): str(v) for k, v in stored.items()})
        if self.template is None:
            raise ConfigError(f"--design {self.missing}: no such file, and the run has no stored template")
        session.save_state(STATE_TEMPLATE, dict(self.template.files))
        return self.template


TEMPLATE_FILE_MAX_BYTES = 4 * 1024 * 1024


def read_template_files(path: Path, main: str) -> dict[str, str]:
    """A template's files: a file's text as the problem's main file `main`; a directory's
    regular files by relative path (hidden ones left out, as a design directory's).

    Raises:
        ConfigError: a file that cannot be read as UTF-8 text, one over 4 MiB, or an empty
            directory.
    """
    def read(p: Path) -> str:
        if p.stat().st_size > TEMPLATE_FILE_MAX_BYTES:
            raise ConfigError(f"--design {p}: over {TEMPLATE_FILE_MAX_BYTES} bytes: a design's files are sources")
        try:
            return p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--design {p}: cannot be read ({e})") from e

    if not path.is_dir():
        return {main: read(path)}
    files = {p.relative_to(path).as_posix(): read(p) for p in sorted(path.rglob("*"))
             if p.is_file() and not p.is_symlink() and not any(x.startswith(".") for x in p.relative_to(path).parts)}
    if not files:
        raise ConfigError(f"--design {path}: the directory holds no file")
    return files


def reference_template(problem: Problem) -> Template | None:
    """The template the problem's reference declares, or None when it declares no parameter: the
    reference as written where its domain gives it (`Domain.written_reference`), else its files as a
    design (the domain's `offline_design`).

    Raises:
        TemplateError: the reference declares parameters that cannot be read.
    """
    domain = get_domain(problem.domain)
    if domain.written_reference is not None:
        files = domain.written_reference(problem)
    else:
        files = text_files(domain.prompts.offline_design(problem), domain.main_file(problem))
    return parse_template(files) if is_template(files) else None


def design_text(files: Mapping[str, str], main: str) -> tuple[str, dict[str, str]]:
    """A rendered point as `Session.evaluate`'s text and extra files: the main file's text
    and the others, or, without a main file, the first file under its `FILE_MARKER` line."""
    rest = dict(files)
    if main in rest:
        return rest.pop(main), rest
    first = min(rest)
    return f"{FILE_MARKER.format(name=first)}\n{rest.pop(first)}", rest


# -- what `show` says of a study --------------------------------------------------------------------


@dataclass(frozen=True)
class TunedPoint:
    """One evaluated point, as `show` lists it."""

    design_id: str
    point: Point
    status: str
    speedup: float | None
    """The paired speedup over the reference (None unless passed and timed)."""


@dataclass(frozen=True)
class Tuning:
    """A run's study: the points tried in order, the best, and the objective per parameter value."""

    points: tuple[TunedPoint, ...]
    best: TunedPoint | None
    """The fastest ranked point (valid, stably timed), if any."""
    by_value: dict[str, dict[str, tuple[int, float | None]]]
    """Parameter -> value (as text) -> (points tried with it, the best speedup among them)."""

    def to_json(self) -> dict[str, Any]:
        def one(p: TunedPoint) -> dict[str, Any]:
            return {"design_id": p.design_id, "params": dict(p.point), "status": p.status, "speedup": p.speedup}

        return {"points": [one(p) for p in self.points], "best": one(self.best) if self.best else None,
                "by_value": {k: {v: {"tried": n, "best_speedup": s} for v, (n, s) in vals.items()}
                             for k, vals in self.by_value.items()}}


def tuning(designs: Sequence[DesignView]) -> Tuning | None:
    """The study of a run's designs (those tagged with `params`), oldest first; None when none is."""
    points = []
    for d in sorted(designs, key=lambda d: d.created_at):
        raw = d.tags.get(TAG_PARAMS)
        if isinstance(raw, dict) and raw:
            speedup = d.speedup if d.status in MEASURED else None
            points.append(TunedPoint(d.id, {str(k): v for k, v in raw.items()}, d.status, speedup))
    if not points:
        return None
    ranked_ok = [p for p in points if p.status == "valid" and p.speedup is not None]
    best = max(ranked_ok, key=lambda p: p.speedup or 0.0, default=None)
    by_value: dict[str, dict[str, tuple[int, float | None]]] = {}
    for p in points:
        for name, value in p.point.items():
            n, s = by_value.setdefault(name, {}).get(str(value), (0, None))
            seen = [x for x in (s, p.speedup if p.status == "valid" else None) if x is not None]
            by_value[name][str(value)] = (n + 1, max(seen) if seen else None)
    return Tuning(tuple(points), best, by_value)


@dataclass(frozen=True)
class Shares:
    """How much of a run's best came from the tuner and how much from designs written otherwise
    (by agents, recipes, files), for a run that has both; the report's Tuning section and
    `compare` say it."""

    best_id: str
    """The run's best ranked design."""
    best_speedup: float | None
    best_author: str | None
    from_tuner: bool
    """Whether the run's best is a tuned point."""
    tuned_best: TunedPoint | None
    """The best ranked tuned point (None: no tuned point is ranked)."""
    written_best: DesignView
    """The fastest design written otherwise that passed the harness."""
    tuned: int
    """Points the tuner evaluated."""
    written: int
    """Designs written otherwise that passed the harness."""
    template_authors: tuple[str, ...] = ()
    """Who wrote the templates the tuned points came from, when agents handed theirs to the
    tuner (`handoff` tags: `search/policies/handoff.py`); empty: the `tune` policy's template."""
    best_template_author: str | None = None
    """The author of the template the run's best came from, when it is a tuned point of an agent's."""

    @property
    def tuner_factor(self) -> float | None:
        """The best tuned point's speedup over the best written design's: above 1, what tuning
        added beyond the designs written otherwise; below 1, how far short it fell."""
        t, w = self.tuned_best.speedup if self.tuned_best else None, self.written_best.speedup
        return t / w if t is not None and w else None

    def sentence(self) -> str:
        """`the run's best (0123abcd4567, 3.1x) came from the tuner: ...`."""
        src = "the tuner" if self.from_tuner else f"{self.best_author or 'a written design'} (not the tuner)"
        if self.from_tuner and self.best_template_author:
            src = f"the tuner, tuning a template {self.best_template_author} wrote"
        tuned = f"{self.tuned_best.speedup:.3g}x" if self.tuned_best and self.tuned_best.speedup is not None \
            else "none ranked"
        factor = f" ({self.tuner_factor:.3g}x the written best)" if self.tuner_factor is not None else ""
        shown = f"{self.best_speedup:.3g}x" if self.best_speedup is not None else "-"
        return (f"the run's best ({self.best_id[:12]}, {shown}) came from {src}; best tuned point of "
                f"{self.tuned}: {tuned}{factor}; best of the {self.written} designs written otherwise: "
                f"{self.written_best.id[:12]} by {self.written_best.author or '?'}, "
                f"{self.written_best.speedup or 0.0:.3g}x")

    def to_json(self) -> dict[str, Any]:
        return {"best_id": self.best_id, "best_speedup": self.best_speedup, "best_author": self.best_author,
                "from_tuner": self.from_tuner, "tuned_points": self.tuned, "written_passed": self.written,
                "tuned_best": ({"design_id": self.tuned_best.design_id, "params": dict(self.tuned_best.point),
                                "speedup": self.tuned_best.speedup} if self.tuned_best else None),
                "written_best": {"design_id": self.written_best.id, "author": self.written_best.author,
                                 "speedup": self.written_best.speedup},
                "tuner_factor": self.tuner_factor, "template_authors": list(self.template_authors),
                "best_template_author": self.best_template_author}


def shares(designs: Sequence[DesignView], study: Tuning) -> Shares | None:
    """Where the run's best came from (see `Shares`); None when no design written otherwise
    passed the harness, or no design is ranked."""
    tuned = {p.design_id for p in study.points}
    written = [d for d in designs if d.id not in tuned and d.status in MEASURED and d.speedup is not None]
    top = ranked(designs)
    if not written or not top:
        return None
    best = top[0]
    authors = {d.id: _template_author(d) for d in designs if d.id in tuned}
    return Shares(best.id, best.speedup, best.author, best.id in tuned, study.best,
                  max(written, key=lambda d: d.speedup or 0.0), len(study.points), len(written),
                  tuple(sorted({a for a in authors.values() if a})), authors.get(best.id))


def _template_author(d: DesignView) -> str | None:
    """Who wrote the template a tuned point came from (its `handoff` tag), or None (the `tune`
    policy's template)."""
    raw = d.tags.get(TAG_HANDOFF)
    return str(raw.get("author") or "an agent") if isinstance(raw, dict) else None
