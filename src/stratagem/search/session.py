"""Owns the Session a policy (and its writers) work through during a run: store every design
before it is evaluated and every verdict as it comes back, link a restated design to the
earlier one's verdict, review suspicious bests, re-time unstable ones, record agent calls and
count them against the budgets, and keep the live view's `Progress`.

The loop (`search/loop.py`) drives iterations and stop rules; this object is what it hands the
policy (`core.search.Session`), and the state the loop reads back (views, spend, progress).
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from stratagem.config import StratagemConfig
from stratagem.core.design import Design, text_files
from stratagem.core.graph import ValidatorGraph
from stratagem.core.inflight import InFlight
from stratagem.core.problem import Problem
from stratagem.core.search import (
    AgentCall,
    DesignView,
    Feedback,
    Meter,
    Policy,
    ProbeMode,
    Remaining,
    Reservation,
    SearchState,
)
from stratagem.core.verdict import FailureKind, ValidatorResult, Verdict, inconclusive
from stratagem.domains import get_domain, names_of
from stratagem.errors import HarnessError, ProblemError
from stratagem.evaluation.results import Baseline
from stratagem.evaluation.service import Evaluator
from stratagem.search import probes
from stratagem.search import state as st
from stratagem.search.budget import PROBES_KEY, Budgets, Spend, evaluation_seconds
from stratagem.search.numbers import counts as counts_of
from stratagem.search.progress import Progress, RunView
from stratagem.store.records import AgentCallRecord, DesignRecord, EvaluationRecord, ReviewRecord
from stratagem.store.sqlite import RunStore

HARNESS_FAILURES_MAX = 3
"""Consecutive evaluations failing with `harness_error` (broken infrastructure) that stop a run."""

RETIMES_MAX = 2
"""New evaluations a run spends on one design whose timing stayed unstable (each already
re-times in its worker up to `timing.max_retimes` times)."""


AUDIT_LIMIT_FACTOR = 3.0
"""A red-team audit's run limit, in evaluations' limits: it repeats the correctness trials at
several distributions, compares outputs again after a delay and times the design again, about
three evaluations' worth of calls (a real audit killed at one evaluation's limit judged nothing)."""


class RunSession:
    """One run's services to its policy (`core.search.Session`), and the state behind them."""

    def __init__(
        self,
        cfg: StratagemConfig,
        problem: Problem,
        store: RunStore,
        evaluator: Evaluator,
        policy: Policy,
        view: RunView | None = None,
    ) -> None:
        self.cfg = cfg
        self.problem = problem
        self.store = store
        self.evaluator = evaluator
        self.policy = policy
        self.view = view
        self.spend = Spend.from_store(store)
        self.budgets = Budgets(cfg.search, self.spend)
        planned = getattr(policy, "max_iterations", None)  # a policy that knows it stops sooner
        total = min(cfg.search.iterations, planned) if isinstance(planned, int) else cfg.search.iterations
        if total >= getattr(policy, "unbounded_iterations", float("inf")):
            total = 0  # a policy its budgets stop (PIKE), with no iteration limit: no count to show
        self.progress = Progress(problem=problem.name, policy=policy.name, iterations=total, spend=self.spend)
        self.reference_ms: dict[str, float | None] = {}
        self.baseline: Baseline | None = None
        """The reference baselines this invocation measured before its first iteration: every
        evaluation's chained speedups (vs compile) and reference-drift check use them."""
        self.iteration: int | None = None
        """The iteration in progress (None between iterations): stored with designs and calls."""
        self.iteration_ids: list[str] = []
        """The designs the iteration in progress evaluated (or linked), in order."""
        self._inflight: dict[str, asyncio.Future[Feedback]] = {}
        self._probed: dict[tuple[str, str], asyncio.Future[Verdict | str]] = {}
        """Probe answers by (mode, design id): the same probe of the same code runs once per
        invocation (an agent's second `profile` of the reference is its first answer), and one
        asked before anyone needs it (`prefetch`) is shared with whoever asks next."""
        self._views: dict[str, DesignView] | None = None
        self._norms: dict[str, str] | None = None
        self._harness_failures = 0
        self._eval_s: list[float] = []
        """Wall seconds of this invocation's finished evaluations (the live view's estimate)."""

    # -- state ----------------------------------------------------------------------------

    def views(self) -> list[DesignView]:
        """Every evaluated design, oldest first (kept in memory, updated as verdicts arrive, so
        an iteration's cost does not grow with the size of the run)."""
        if self._views is None:
            self._views = {v.id: v for v in st.design_views(
                self.store.designs(self.problem.id), self.store.evaluations(), self.store.reviews(),
                self._source, self.store.tags(), domain=self.problem.domain)}
        return list(self._views.values())

    def _source(self, d: DesignRecord) -> str:
        return st.design_text(self.store, d)

    def view_of(self, design_id: str) -> DesignView | None:
        self.views()  # builds the in-memory views on first use
        return (self._views or {}).get(design_id)

    def _update_view(self, design_id: str) -> None:
        if self._views is None:
            self.views()
            return
        rec = self.store.design(design_id)
        if rec is None:
            return
        reviews = [r for r in self.store.reviews() if r.design_id == design_id]
        for v in st.design_views([rec], self.store.evaluations(design_id), reviews, self._source,
                                 self.store.tags(design_id), domain=self.problem.domain):
            self._views[v.id] = v

    def state(self, iteration: int) -> SearchState:
        on = self.cfg.evaluation.model_copy(update={"device": self.evaluator.physical_device})  # rules in its words
        facts = dict(get_domain(self.problem.domain).open(self.problem, on).agent_facts())
        known = {f.name for f in dataclasses.fields(SearchState)}
        named: dict[str, Any] = {k: tuple(v) if k == "rules" else v for k, v in facts.items()
                                 if k in known and k != "facts"}
        return SearchState(
            problem=self.problem, designs=tuple(self.views()), iteration=iteration,
            reference_ms=dict(self.reference_ms), device=self.evaluator.physical_device,
            environment=self._environment(), **named,
            facts={k: v for k, v in facts.items() if k not in known},
        )

    def _environment(self) -> dict[str, Any]:
        """What the harness measured about the machine (the baseline's, else the latest
        evaluation's), and the problem's output dtype once a timing has counted its work."""
        evs = self.store.evaluations()
        env = dict(self.baseline.environment) if self.baseline is not None and self.baseline.environment else (
            dict(evs[-1].environment) if evs else {})
        for ev in reversed(evs):
            timing = next((v for v in ev.validators if v.get("name") == "timing"), None)
            work = ((timing or {}).get("details") or {}).get("work") or {}
            if isinstance(work, dict) and work.get("dtype"):
                env["problem_dtype"] = str(work["dtype"])
                break
        return env

    def refresh(self) -> None:
        views = self.views()
        p = self.progress
        p.counts = counts_of(views)
        best = st.best_of(views)
        p.best_speedup, p.best_id = (best.speedup, best.id) if best else (None, None)
        slower = f" (slower than {names_of(self.problem.domain).reference})"
        noise = {"within noise": " (within noise)", "slower": slower}.get(best.vs_reference() or "", "") if best else ""
        p.best_text = best.speedup_text() + noise if best else "-"
        if self.view is not None:
            self.view.update(p)

    # -- the Session a policy works through -----------------------------------------------

    async def evaluate(
        self, source: str, *, strategy: str, parents: Sequence[str] = (), author: str = "",
        tags: Mapping[str, Any] | None = None, files: Mapping[str, str] | None = None,
    ) -> Feedback:
        provenance = {"iteration": self.iteration, "strategy": strategy, "author": author or "unknown"}
        main = get_domain(self.problem.domain).main_file(self.problem)
        design = Design(files={**text_files(source, main), **dict(files or {})}, parent_ids=tuple(parents),
                        provenance=provenance)
        form = get_domain(self.problem.domain).normal_form(design.files)
        twin = self._twin(form, design.id)
        key = twin or design.id
        if self.iteration is not None and key not in self.iteration_ids:
            self.iteration_ids.append(key)
        done = self.store.evaluations(key)
        if done:  # the same files, or a restatement of an evaluated design: its verdict, linked
            if tags:
                self.tag(key, **tags)
            return self._restated(self._feedback(key, done[-1], reused=True), twin)
        if key in self._inflight:  # two agents wrote the same design at once
            fb = await asyncio.shield(self._inflight[key])
            if tags:
                self.tag(key, **tags)
            return self._restated(Feedback(fb.design_id, fb.status, fb.report, fb.runtime_ms, fb.speedup,
                                           reused=True, duplicate_of=key), twin)
        fut: asyncio.Future[Feedback] = asyncio.get_running_loop().create_future()
        self._inflight[design.id] = fut
        if form is not None:
            self._forms().setdefault(form, design.id)
        try:
            self.store.add_design(self.problem.id, design, tags)
            fb = await self.evaluate_stored(design)
            fut.set_result(fb)
            return fb
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._inflight.pop(design.id, None)

    def record_rejected(
        self, source: str, *, reason: str, validator: str, kind: FailureKind, strategy: str,
        parents: Sequence[str] = (), author: str = "", tags: Mapping[str, Any] | None = None,
        files: Mapping[str, str] | None = None,
    ) -> Feedback:
        """Store a design refused before any harness stage (a writer's template that cannot be
        tuned: `search/policies/handoff.py`) with one failed validator, `validator` (of `kind`,
        saying `reason`): a failed attempt kept as data, never run, costing no evaluation time.
        The same files refused again get their stored verdict."""
        provenance = {"iteration": self.iteration, "strategy": strategy, "author": author or "unknown"}
        main = get_domain(self.problem.domain).main_file(self.problem)
        design = Design(files={**text_files(source, main), **dict(files or {})}, parent_ids=tuple(parents),
                        provenance=provenance)
        if self.iteration is not None and design.id not in self.iteration_ids:
            self.iteration_ids.append(design.id)
        done = self.store.evaluations(design.id)
        if done:
            return self._feedback(design.id, done[-1], reused=True)
        self.store.add_design(self.problem.id, design, tags)
        result = ValidatorResult(validator, "failed", reason, kind, duration_s=0.0)
        rec = EvaluationRecord(design_id=design.id, problem_id=self.problem.id, status="invalid",
                               device=self.evaluator.physical_device, runtime_ms=None, speedup=None,
                               validators=[result.to_json()], environment={}, seeds=[], reference_ms={},
                               created_at=time.time())
        self.store.add_evaluation(rec)
        self._update_view(design.id)
        self.spend.add_evaluation(rec)
        self.progress.event(f"{design.id[:10]} refused: {reason[:60]}")
        self.refresh()
        return self._feedback(design.id, rec)

    def _forms(self) -> dict[str, str]:
        """Normal form -> the first stored design with it (built from the store on first use)."""
        if self._norms is None:
            domain = get_domain(self.problem.domain)
            self._norms = {}
            for d in self.store.designs(self.problem.id):
                files = {n: self.store.get_artifact(h) for n, h in d.files.items()}
                if (f := domain.normal_form(files)) is not None:
                    self._norms.setdefault(f, d.id)
        return self._norms

    def _twin(self, form: str | None, design_id: str) -> str | None:
        """An earlier design (evaluated or being evaluated) this one only restates, if any."""
        if form is None:
            return None
        twin = self._forms().get(form)
        return twin if twin is not None and twin != design_id else None

    @staticmethod
    def _restated(fb: Feedback, twin: str | None) -> Feedback:
        """The earlier design's feedback, marked as a restatement of it (what the writer is told)."""
        if twin is None:
            return replace(fb, duplicate_of=fb.design_id)
        note = (f"Not evaluated again: this design only restates design `{twin[:12]}` (the same program once "
                "comments, whitespace, docstrings and local names are normalized), so it has that design's verdict.")
        return replace(fb, duplicate_of=twin, report=f"{note}\n{fb.report}")

    async def evaluate_stored(self, design: Design) -> Feedback:
        self.progress.event(f"evaluating {design.id[:10]} ({design.provenance.get('author', '')})")
        self.refresh()
        # The speedup over eager is paired in the design's own worker; the chained ones use the
        # baselines this invocation measured before its first iteration.
        key = design.id[:10]
        expect = statistics.median(self._eval_s) if self._eval_s else None
        entry = InFlight(f"{key} ({design.provenance.get('author', '')})", "starting", time.time(), expect)
        self.progress.inflight[key] = entry

        def on_stage(name: str) -> None:
            entry.stage, entry.stage_since = name, time.time()
            self.refresh()

        try:
            ev = await self.evaluator.evaluate(self.problem, design, baseline=self.baseline,
                                               refresh_baseline=self.baseline is None, on_stage=on_stage)
        finally:
            self.progress.inflight.pop(key, None)
        self._eval_s.append(ev.wall_s)
        rec = ev.to_record()
        self.store.add_evaluation(rec)
        self._update_view(design.id)
        self.spend.add_evaluation(rec)
        # (the run's reference timings stay the invocation's baseline; each design's own eager,
        # timed beside it, is stored with its evaluation)
        broken = next((r for r in ev.verdict.failures if r.kind == "problem_error"), None)
        if broken is not None:  # the reference itself fails: no design can be judged
            raise ProblemError(f"{self.problem.name}: the reference problem fails in the harness, so no "
                               f"design can be judged: [{broken.name}] {broken.reason}")
        harness = next((r for r in ev.verdict.failures if r.kind == "harness_error"), None)
        self._harness_failures = self._harness_failures + 1 if harness is not None else 0
        if harness is not None and self._harness_failures >= HARNESS_FAILURES_MAX:
            raise HarnessError(f"the harness failed {self._harness_failures} evaluations in a row; "
                               f"the last: [{harness.name}] {harness.reason}")
        fb = self._feedback(design.id, rec)
        if fb.status == "valid":
            fb = await self._maybe_review(design, fb)
        view = self.view_of(design.id)
        speed = f" {view.speedup_text()}" if view is not None and view.speedup is not None else ""
        self.progress.event(f"{design.id[:10]} {fb.status}{speed}")
        self.refresh()
        return fb

    async def _maybe_review(self, design: Design, fb: Feedback) -> Feedback:
        """A design far faster than eager that would become the best is inspected first."""
        if fb.speedup is None or fb.speedup < self.cfg.agents.suspicious_speedup:
            return fb
        best = st.best_of([v for v in self.views() if v.id != design.id])
        if best is not None and best.speedup is not None and fb.speedup <= best.speedup:
            return fb
        view = self.view_of(design.id)
        return (await self._review(view) if view is not None else None) or fb

    async def _review(self, view: DesignView) -> Feedback | None:
        """The policy's review of `view`, stored; the resulting feedback (None: no reviewer)."""
        review = await self.policy.review(view, self.state(self.iteration or 0), self)
        if review is None:
            return None
        self.store.add_review(ReviewRecord(design_id=view.id, cheating=review.cheating,
                                           reason=review.reason, created_at=time.time(),
                                           failed=review.failed))
        self._update_view(view.id)
        if review.failed:
            self.progress.event(f"{view.id[:10]} not reviewed (will retry): {review.reason[:60]}")
        elif review.cheating:
            self.progress.event(f"{view.id[:10]} flagged by review: {review.reason[:60]}")
        now = self.view_of(view.id) or view
        return Feedback(view.id, now.status, now.report, now.runtime_ms, now.speedup)

    async def retry_review(self) -> None:
        """Review again the fastest design whose review failed, if it would be the best: until
        a review clears it, it cannot become the best (one attempt per iteration)."""
        waiting = self._would_lead("unreviewed")
        if waiting:
            fastest = waiting[0]
            self.progress.event(f"retrying the review of {fastest.id[:10]}")
            await self._review(fastest)

    def _would_lead(self, status: str) -> list[DesignView]:
        """Designs of `status` with a paired speedup above the current best's, fastest first."""
        views = self.views()
        best = st.best_of(views)
        top = best.speedup if best is not None and best.speedup is not None else 0.0
        out = [v for v in views if v.status == status and v.speedup is not None and v.speedup > top]
        return sorted(out, key=lambda v: -(v.speedup or 0.0))

    async def retime_unstable(self) -> None:
        """Evaluate again the fastest design whose timing stayed unstable, if it would be the
        best (at most RETIMES_MAX more evaluations per design): until a stable re-timing
        exists, it is not ranked."""
        busy = sorted((v for v in self.views() if v.status == "busy"), key=lambda v: -v.created_at)
        for v in [*self._would_lead("unstable"), *busy]:
            if len(self.store.evaluations(v.id)) > RETIMES_MAX:
                continue
            design = self._stored(v.id)
            if design is None:
                continue
            self.progress.event(f"re-timing {v.id[:10]} ({v.status}: {v.stability[:60]})")
            await self.evaluate_stored(design)
            return

    def _feedback(self, design_id: str, ev: EvaluationRecord, reused: bool = False) -> Feedback:
        view = self.view_of(design_id)
        if view is not None and view.status in ("flagged", "unreviewed", "unstable", "busy"):
            return Feedback(design_id, view.status, view.report, view.runtime_ms, view.speedup, reused=reused)
        return Feedback(design_id, ev.status, st.report_of(ev),  # type: ignore[arg-type]
                        ev.runtime_ms, ev.speedup, reused=reused, **st.failure_info(ev))

    def probes(self) -> tuple[ProbeMode, ...]:
        return probes.offered(self.problem)

    async def probe(self, mode: ProbeMode, target: str, *, author: str = "") -> str:
        graph = probes.graph_of(self.problem, mode) if mode in self.probes() else None
        if graph is None:
            return f"`{mode}` is not offered for this problem"
        design, of = probes.target(self.problem, target, self.views())
        key = (mode, design.id)
        task = self._probed.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            what = f"{author or 'an agent'}: {mode} of {of}"
            task = self._probed[key] = asyncio.ensure_future(self._run_graph(graph, design, what))
        verdict = await asyncio.shield(task)
        if isinstance(verdict, str) or verdict.status not in ("valid", "invalid"):
            self._probed.pop(key, None)  # a budget, a busy or broken harness: asked again, it runs again
        if isinstance(verdict, str):
            return f"`{mode}` {verdict}" if verdict.startswith("not run") else f"`{mode}` of {of} {verdict}"
        measured = next((v.measures for v in reversed(self.views()) if v.measures.floor_ms), None)
        return probes.probe_text(mode, verdict, of, measured.floor_ms if measured else None,
                                 measured.floor_basis if measured else None)

    def prefetch(self, mode: ProbeMode, target: str = "reference") -> None:
        """Start `mode` of `target` now, its verdict kept for the first agent that asks (on a
        queue of batch calls to a GPU host, it rides with the work already queued instead of
        costing a round trip of its own); nothing when the problem does not offer it."""
        if mode in self.probes():
            task = asyncio.ensure_future(self.probe(mode, target, author="the run"))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # never an unretrieved error

    async def audit(self, design_id: str) -> Verdict | str:
        graph = probes.graph_of(self.problem, "breach")
        if graph is None:
            return f"not run: the {self.problem.domain} domain has no red-team audit"
        design = self._stored(design_id)
        if design is None:
            return f"not run: no design {design_id[:12]} in this run"
        verdict = await self._run_graph(graph, design, f"red-team audit of {design_id[:10]}", compute_only=True,
                                        limit_factor=AUDIT_LIMIT_FACTOR)
        if isinstance(verdict, Verdict) and verdict.status in ("valid", "invalid") and inconclusive(verdict) is None:
            first = verdict.failures[0] if verdict.failures else None
            reason = (f"red-team audit: {first.name}: {first.reason}" if first is not None
                      else "red-team audit passed: " + ", ".join(r.name for r in verdict.results))
            self.store.add_review(ReviewRecord(design_id=design_id, cheating=first is not None, reason=reason,
                                               created_at=time.time()))
            self._update_view(design_id)
            if first is not None:
                self.progress.event(f"{design_id[:10]} breached the harness: {reason[:70]}")
        return verdict

    def _stored(self, design_id: str) -> Design | None:
        rec = self.store.design(design_id)
        if rec is None:
            return None
        return Design(files={n: self.store.get_artifact(h) for n, h in rec.files.items()},
                      parent_ids=tuple(rec.parent_ids), provenance=rec.provenance)

    async def _run_graph(self, graph: ValidatorGraph, design: Design, what: str,
                         compute_only: bool = False, limit_factor: float = 1.0) -> Verdict | str:
        """Run one of the domain's named graphs on `design` in the sandbox, counted in the
        spend (`Spend.probes`); a verdict, or why there is none (a budget used up: any, or with
        `compute_only` those of harness work alone). Its run limit is an evaluation's, fitted to
        the problem by the run's reference time like the designs' own; with `limit_factor`,
        that many evaluations' limits and one compile's, as one limit."""
        if (spent := self.budgets.exhausted(compute_only)) is not None:
            return f"not run: a budget of the run is used up ({spent})"
        self.progress.event(what)
        self.refresh()
        try:
            limit = None
            if limit_factor != 1.0:  # the whole limit, one compile's included (an override bounds both)
                task = get_domain(self.problem.domain).open(self.problem, self.evaluator.cfg)
                ms = self.baseline.reference_ms if self.baseline is not None else None
                limit = limit_factor * task.timeout_s(None, ms) + (task.compile_timeout_s(None) or 0.0)
            ev = await self.evaluator.evaluate(self.problem, design, with_baseline=False, graph=graph,
                                               baseline=self.baseline, timeout_s=limit)
        except (HarnessError, OSError) as e:
            return f"could not run (the harness failed, not the code): {e}"
        seconds = evaluation_seconds(ev.to_record())
        self.spend.add_probe(seconds)
        done = self.store.policy_state(PROBES_KEY) or {}
        self.store.set_policy_state(PROBES_KEY, {"runs": self.spend.probes,
                                                 "seconds": float(done.get("seconds", 0.0)) + seconds})
        self.refresh()
        return ev.verdict

    def record_call(self, call: AgentCall) -> None:
        self.store.add_agent_call(AgentCallRecord(
            iteration=self.iteration, role=call.role, model=call.model, prompt_hash=call.prompt_hash,
            input_tokens=call.input_tokens, output_tokens=call.output_tokens, requests=call.requests,
            cost_usd=call.cost_usd, latency_s=call.latency_s, retries=call.retries, ok=call.ok,
            error=call.error, messages_hash=self.store.put_artifact(call.messages_json),
            created_at=time.time(),
        ))
        self.spend.add_call(call)
        self.refresh()

    def meter(self) -> Meter:
        return self.budgets.meter()

    def budget_left(self) -> str | None:
        return self.budgets.exhausted()

    def tag(self, design_id: str, **tags: Any) -> None:
        self.store.set_tags(design_id, tags)
        self._update_view(design_id)

    def tags(self, design_id: str) -> dict[str, Any]:
        return self.store.tags(design_id).get(design_id, {})

    def budget_remaining(self) -> Remaining:
        return self.budgets.remaining()

    def save_state(self, key: str, value: Any) -> None:
        self.store.set_policy_state(f"{self.policy.name}/{key}", value)

    def load_state(self, key: str) -> Any:
        return self.store.policy_state(f"{self.policy.name}/{key}")

    def feedback(self, design_id: str) -> Feedback | None:
        done = self.store.evaluations(design_id)
        return self._feedback(design_id, done[-1]) if done else None

    def reserve(self, queries: int) -> AbstractContextManager[Reservation]:
        return self.budgets.reserve(queries)

    def set_status(self, worker: str, status: str) -> None:
        self.progress.workers[worker] = status
        self.refresh()
