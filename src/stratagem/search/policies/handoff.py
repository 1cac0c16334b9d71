"""Owns the hand-off of an agent's template to the tuner (issue 27, item 3; docs/tune.md): a
writer (`auto`'s Implementor, a PIKE writer) may answer with a **template** (a design that
declares its parameters, `core/template.py`) instead of a fixed design; the loop then tunes it.

`HandoffSession` wraps the run's Session for a policy's writers. Its `evaluate` passes a fixed
design through unchanged; a template is tuned for `[search] tune_evaluations` points with the
`tune` policy's study (`TunePolicy.propose`, the same TPE sampler, penalty and constraint
handling; the template's defaults first, the agent's own guess):

- every point is rendered and evaluated through the Session as an ordinary design (the harness
  and its integrity checks, the run's device-seconds and wall budgets charged, each distinct
  design once), stored with the tags `params`, `template` (the study's id) and `handoff` (the
  template's author, the point's number), as the writer's design: its author and parents, so a
  point's parent is the template's author's parent, labelled `tuned point` (`TUNED_POINT`);
- tuning stops after the configured number of points, when the run's device-seconds or wall
  budget is spent (at least one point is evaluated, as any written design is; the query, token
  and money budgets are the writers', and tuning asks no model), or when every feasible point
  is known;
- the writer gets back the best point's feedback, its report headed by every point's verdict,
  so the fix loop goes on as after any evaluation (a valid best ends it); the best point is a
  design of the run like any other, tagged with every point of its template (`TAG_POINTS`), and
  prompts show its parameters and that table of points and verdicts (`context/designs.py`);
- `tune_evaluations = 0`: the template's defaults, evaluated as one design;
- a template that cannot be tuned (it cannot be read, no point meets its constraints, its
  defaults break one with tuning off) is a failed attempt: stored
  as a design with a failed `template` verdict and the reason (`RecordsRejections`), never
  run, and that verdict is what the writer is told.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from stratagem.config import StratagemConfig
from stratagem.core.design import Design, files_text, text_files
from stratagem.core.problem import Problem
from stratagem.core.search import (
    MEASURED,
    AgentCall,
    DesignView,
    Feedback,
    Meter,
    ProbeMode,
    Remaining,
    Reservation,
    Session,
)
from stratagem.core.template import (
    ENUMERATE_MAX,
    Point,
    Template,
    TemplateError,
    is_template,
    parse_template,
)
from stratagem.core.verdict import FailureKind, Verdict
from stratagem.domains import get_domain
from stratagem.errors import MissingExtra
from stratagem.search.policies.registry import TuneSettings
from stratagem.search.policies.tune import (
    TAG_HANDOFF,
    TAG_PARAMS,
    TAG_POINTS,
    TAG_TEMPLATE,
    TUNED_POINT,
    Trial,
    TunePolicy,
    design_text,
    history,
    key,
    point_text,
)

STATE_TEMPLATES = "handoff/template"
"""Policy state `handoff/template/<id>`: the files of each template handed off (its text is
kept with the run; the points carry only its id)."""
REJECTED_VALIDATOR = "template"
"""The validator named in a rejected template's verdict."""


@dataclass(frozen=True)
class HandoffSettings:
    """How the loop tunes a writer's template."""

    evaluations: int = 6
    """Points per hand-off (`[search] tune_evaluations`); 0: the defaults, as one design."""
    tune: TuneSettings = field(default_factory=TuneSettings)
    """The study's settings (`[policies.tune]`: startup, draws, penalty, seed; `design` unused)."""
    seed: int = 0

    @classmethod
    def of(cls, cfg: StratagemConfig) -> HandoffSettings:
        """From `[search] tune_evaluations`, `[policies.tune]` and `[search] seed`."""
        raw = {k: v for k, v in (cfg.policies.get("tune") or {}).items() if k != "design"}
        return cls(cfg.search.tune_evaluations, TuneSettings.model_validate(raw), cfg.search.seed)


@runtime_checkable
class RecordsRejections(Protocol):
    """A Session that stores a design refused before any harness stage, with a failed verdict
    (the run's `RunSession`)."""

    def record_rejected(
        self, source: str, *, reason: str, validator: str, kind: FailureKind, strategy: str,
        parents: Sequence[str] = (), author: str = "", tags: Mapping[str, Any] | None = None,
        files: Mapping[str, str] | None = None,
    ) -> Feedback: ...


@dataclass(frozen=True)
class TunedPoint:
    """One point of a hand-off and its verdict."""

    point: Point
    feedback: Feedback

    @property
    def measured(self) -> bool:
        return self.feedback.status in MEASURED and self.feedback.speedup is not None

    def line(self) -> str:
        fb = self.feedback
        speed = f", {fb.speedup:.3g}x" if fb.speedup is not None else ""
        why = f" ({fb.kind})" if fb.kind else ""
        return f"- {point_text(self.point)}: {fb.status}{why}{speed} (design `{fb.design_id[:12]}`)"


class HandoffSession:
    """The run's Session as a policy's writers see it: a template given to `evaluate` is tuned
    (module docstring); every other call is the run's Session's."""

    def __init__(self, inner: Session, problem: Problem, settings: HandoffSettings,
                 designs: Sequence[DesignView] = ()) -> None:
        """`designs`: the run's designs when the iteration began (a template handed off again
        continues its study instead of proposing its points anew)."""
        self.inner = inner
        self.problem = problem
        self.settings = settings
        self.designs = tuple(designs)
        self.main = get_domain(problem.domain).main_file(problem)
        self._trials: dict[str, list[Trial]] = {}
        self.rendered: dict[str, str] = {}
        """Design id -> text of every point this session evaluated (a writer's answer was the
        template; a policy that keeps sources keeps the point's)."""

    # -- the Session protocol -------------------------------------------------------------------

    async def evaluate(
        self, source: str, *, strategy: str, parents: Sequence[str] = (), author: str = "",
        tags: Mapping[str, Any] | None = None, files: Mapping[str, str] | None = None,
    ) -> Feedback:
        written = {**text_files(source, self.main), **dict(files or {})}
        if not is_template(written):  # as the writer called it (`files` only when given)
            more: dict[str, Any] = {"files": files} if files is not None else {}
            return await self.inner.evaluate(source, strategy=strategy, parents=parents, author=author, tags=tags,
                                             **more)
        return await self.tune(written, strategy=strategy, parents=parents, author=author, tags=tags)

    def record_call(self, call: AgentCall) -> None:
        self.inner.record_call(call)

    def meter(self) -> Meter:
        return self.inner.meter()

    def budget_left(self) -> str | None:
        return self.inner.budget_left()

    def tag(self, design_id: str, **tags: Any) -> None:
        self.inner.tag(design_id, **tags)

    def tags(self, design_id: str) -> dict[str, Any]:
        return self.inner.tags(design_id)

    def budget_remaining(self) -> Remaining:
        return self.inner.budget_remaining()

    def save_state(self, key: str, value: Any) -> None:
        self.inner.save_state(key, value)

    def probes(self) -> tuple[ProbeMode, ...]:
        return self.inner.probes()

    async def probe(self, mode: ProbeMode, target: str, *, author: str = "") -> str:
        return await self.inner.probe(mode, target, author=author)

    async def audit(self, design_id: str) -> Verdict | str:
        return await self.inner.audit(design_id)

    def load_state(self, key: str) -> Any:
        return self.inner.load_state(key)

    def feedback(self, design_id: str) -> Feedback | None:
        return self.inner.feedback(design_id)

    def views(self) -> list[DesignView]:
        return self.inner.views()

    def reserve(self, queries: int) -> AbstractContextManager[Reservation]:
        return self.inner.reserve(queries)

    def set_status(self, worker: str, status: str) -> None:
        self.inner.set_status(worker, status)

    # -- the hand-off ---------------------------------------------------------------------------

    async def tune(self, files: Mapping[str, str], *, strategy: str, parents: Sequence[str] = (),
                   author: str = "", tags: Mapping[str, Any] | None = None) -> Feedback:
        """Tune the template `files` (module docstring); the feedback the writer gets."""
        how = {"strategy": strategy, "parents": parents, "author": author, "tags": tags}
        try:
            template = parse_template(files)
        except TemplateError as e:
            return self.reject(files, f"the template cannot be read: {e}", **how)
        n = self.settings.evaluations
        broken = template.violations(template.defaults)
        if n == 0 and broken:
            return self.reject(files, f"tuning is off here (tune_evaluations = 0), so the template's defaults "
                               f"{point_text(template.defaults)} are evaluated, and they violate "
                               f"{'; '.join(broken)}: declare defaults that meet every constraint", **how)
        study: TunePolicy | None = None
        if n > 1:
            try:
                study = TunePolicy(template, self.settings.tune, self.settings.seed)
            except MissingExtra:  # optuna missing: one point (`_next`)
                study = None
        self.inner.save_state(f"{STATE_TEMPLATES}/{template.id}", dict(template.files))
        trials = self._trials_of(template)
        known = len(trials)
        done: list[TunedPoint] = []
        m = max(n, 1)
        stop = f"the {m} {'point' if m == 1 else 'points'} a hand-off is given (tune_evaluations) were evaluated"
        while len(done) < m:
            if done and (spent := self._spent()) is not None:
                stop = f"the run's {spent} budget is spent"
                break
            point, why = self._next(template, trials, study, first=not done, random_ok=n >= 1)
            if point is None:
                stop = why
                break
            self.inner.set_status(author or "tune", f"tuning a template: point {len(done) + 1} of {m}, "
                                  f"{point_text(point)}")
            fb = await self._evaluate_point(template, point, len(done) + 1, m, **how)
            done.append(TunedPoint(point, fb))
            value = fb.speedup if fb.status in MEASURED and fb.speedup is not None else self.settings.tune.penalty
            trials.append(Trial(point, float(value), fb.status, fb.design_id))
        if not done:
            best_known = max((t for t in trials if t.design_id and t.status in MEASURED), key=lambda t: t.value,
                             default=None)
            fb = self.inner.feedback(best_known.design_id) if best_known and best_known.design_id else None
            if fb is None:
                return self.reject(files, f"no point of the template could be evaluated: {stop}", **how)
            return replace(fb, report=f"Your template was not tuned again: {stop} ({known} points known). Its best "
                           f"point so far is design `{fb.design_id[:12]}`.\n\n{fb.report}")
        return self._answer(template, done, known, stop, tags)

    def _spent(self) -> str | None:
        """The evaluation budget that is spent (device seconds, wall), if one is: tuning asks no
        model, so the query, token and money budgets (the writer's) do not stop it."""
        left = self.inner.budget_remaining()
        if left.gpu_seconds is not None and left.gpu_seconds <= 0:
            return "max_gpu_seconds"
        if left.wall_seconds is not None and left.wall_seconds <= 0:
            return "max_wall_seconds"
        return None

    def _trials_of(self, template: Template) -> list[Trial]:
        """What the study of `template` knows: its points among the run's designs at the start
        of the iteration, and those evaluated since (by this session)."""
        if template.id not in self._trials:
            self._trials[template.id] = history(template, self.designs, [], self.settings.tune.penalty)
        return self._trials[template.id]

    def _next(self, template: Template, trials: list[Trial], study: TunePolicy | None, *, first: bool,
              random_ok: bool) -> tuple[Point | None, str]:
        """The next point and why there is none: the defaults first (when they meet the
        constraints and are new), then the study's proposal (its constraint violations added to
        `trials`). Without a study (one point, or optuna missing), one point: the defaults, else
        an untried feasible point at random when `random_ok`."""
        seen = {key(t.point) for t in trials}
        defaults = template.defaults
        if first and not template.violations(defaults) and key(defaults) not in seen:
            return defaults, "the defaults"
        if study is None:
            if first and random_ok and template.size <= ENUMERATE_MAX:
                untried = [p for p in template.points() if key(p) not in seen]
                if untried:
                    return random.Random(self.settings.seed + len(trials)).choice(untried), "at random"
            if not first:
                return None, "optuna is not installed (pip install 'stratagem[tune]'), so one point only"
            return None, "its defaults were evaluated before"
        proposal = study.propose(template, trials)
        trials.extend(Trial(p, self.settings.tune.penalty, "infeasible") for p in proposal.infeasible)
        return proposal.point, proposal.how

    async def _evaluate_point(self, template: Template, point: Point, k: int, of: int, *, strategy: str,
                              parents: Sequence[str], author: str, tags: Mapping[str, Any] | None) -> Feedback:
        files = template.render(point)
        text, extra = design_text(files, self.main)
        fb = await self.inner.evaluate(
            text, strategy=TUNED_POINT, parents=parents, author=author, files=extra or None,
            tags={TAG_PARAMS: dict(point), TAG_TEMPLATE: template.id,
                  TAG_HANDOFF: {"author": author or "unknown", "point": k, "of": of}})
        self.rendered[fb.design_id] = files_text({**text_files(text, self.main), **extra})
        return fb

    def _answer(self, template: Template, done: Sequence[TunedPoint], known: int, stop: str,
                tags: Mapping[str, Any] | None) -> Feedback:
        """The best point's feedback (the last point's when none passed), its report headed by
        every point's verdict; the caller's `tags` go on that design."""
        ranked = [p for p in done if p.measured]
        best = max(ranked, key=lambda p: p.feedback.speedup or 0.0) if ranked else done[-1]
        points = [{"params": dict(t.point), "status": t.status, "design": t.design_id,
                   "speedup": t.value if t.status in MEASURED else None}
                  for t in self._trials_of(template) if t.design_id]
        self.inner.tag(best.feedback.design_id, **(dict(tags) if tags else {}), **{TAG_POINTS: points})
        earlier = f" ({known} points of this template were known from before)" if known else ""
        head = [f"Your answer was a template (parameters {', '.join(template.names)}), so the loop tuned it: "
                f"{len(done)} {'point' if len(done) == 1 else 'points'} evaluated, each as a design of its own, "
                f"until {stop}{earlier}:", *(p.line() for p in done)]
        if ranked:
            head.append(f"The best point, {point_text(best.point)}, is design `{best.feedback.design_id[:12]}` "
                        "(its report follows); it enters the search with its parameters.")
        else:
            head.append(f"No point passed the harness; the report of the last one ({point_text(best.point)}) "
                        "follows. Fix the template (or return a fixed design).")
        new = any(p.feedback.duplicate_of is None for p in done)
        fb = best.feedback
        return replace(fb, report="\n".join(head) + "\n\n" + fb.report, reused=not new and fb.reused,
                       duplicate_of=None if new else fb.duplicate_of)

    def reject(self, files: Mapping[str, str], reason: str, *, strategy: str, parents: Sequence[str] = (),
               author: str = "", tags: Mapping[str, Any] | None = None) -> Feedback:
        """A template that cannot be tuned: stored with a failed verdict where the Session can
        (`RecordsRejections`), never run; the feedback says why."""
        report = (f"[{REJECTED_VALIDATOR}] {reason}. The loop tunes a template only when every declaration reads "
                  "and some point meets every constraint (docs/tune.md); fix it, or return a fixed design.")
        text, extra = design_text(files, self.main)
        if isinstance(self.inner, RecordsRejections):
            return self.inner.record_rejected(text, reason=report, validator=REJECTED_VALIDATOR, kind="malformed",
                                              strategy=strategy, parents=parents, author=author, tags=tags,
                                              files=extra or None)
        return Feedback(Design(files=dict(files)).id, "invalid", report, validator=REJECTED_VALIDATOR,
                        kind="malformed")


def handoff_session(session: Session, cfg: StratagemConfig, problem: Problem,
                    designs: Sequence[DesignView] = ()) -> HandoffSession:
    """The Session a policy's writers get: `session`, tuning the templates they return."""
    return HandoffSession(session, problem, HandoffSettings.of(cfg), designs)
