"""Owns the run loop: iterations of a policy over one problem, the Session the policy works
through (store every design and verdict, review suspicious bests, count budgets), stop rules
(iterations, patience, budgets, an exhausted policy), recovery of a killed run, and Ctrl-C.

Every write goes to the store as it happens (designs before they are evaluated, verdicts as
they come back, agent calls when they end), so a run killed at any point, even with SIGKILL,
resumes from its database: designs stored but never evaluated are evaluated first, a design's
content hash is its identity (never stored or evaluated twice), and an iteration left
`running` is closed as `interrupted`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from stratagem.config import StratagemConfig
from stratagem.core.design import Design, text_files
from stratagem.core.problem import Problem
from stratagem.core.search import (
    AgentCall,
    DesignView,
    Feedback,
    Policy,
    Remaining,
    Reservation,
    SearchState,
)
from stratagem.domains import get_domain
from stratagem.errors import HarnessError, ProblemError
from stratagem.evaluation.service import Baseline, Evaluator
from stratagem.search import state as st
from stratagem.search.budget import Budgets, Spend
from stratagem.search.export import exported_source
from stratagem.search.numbers import Counts
from stratagem.search.numbers import counts as counts_of
from stratagem.store.records import AgentCallRecord, DesignRecord, EvaluationRecord, ReviewRecord
from stratagem.store.sqlite import RunStore

HARNESS_FAILURES_MAX = 3
"""Consecutive evaluations failing with `harness_error` (broken infrastructure) that stop a run."""

RETIMES_MAX = 2
"""New evaluations a run spends on one design whose timing stayed unstable (each already
re-times in its worker up to `timing.max_retimes` times)."""


class RunView(Protocol):
    """Where the loop reports progress (the rich live view, or nothing)."""

    def update(self, snapshot: Progress) -> None: ...


EXHAUSTED = "the policy has nothing more to propose"


@dataclass
class InFlight:
    """An evaluation (or baseline measurement) in progress, as the live view shows it."""

    label: str
    stage: str
    started: float
    """time.time() at its start."""
    expect_s: float | None = None
    """How long one takes here (the median of this invocation's finished ones), when known."""
    stage_since: float | None = None
    """time.time() when `stage` began."""

    def line(self, now: float) -> str:
        elapsed = now - self.started
        eta = ""
        if "waiting for the timing lock" in self.stage:  # a wait is not a slow load: said as such
            eta = f", waiting for {now - (self.stage_since or self.started):.0f} s"
        elif self.expect_s is not None:
            left = self.expect_s - elapsed
            eta = f", about {left:.0f} s left" if left > 0 else ", longer than usual"
        return f"{self.label}: {self.stage} ({elapsed:.0f} s{eta})"


@dataclass
class Progress:
    """What the live view shows."""

    problem: str
    policy: str
    iteration: int = 0
    iterations: int = 0
    strategy: str = ""
    workers: dict[str, str] = field(default_factory=dict)
    counts: Counts = field(default_factory=lambda: counts_of(()))
    """The designs by the one definition every view uses (`search/numbers.py`)."""
    best_speedup: float | None = None
    best_id: str | None = None
    best_text: str = "-"
    """The best design's paired speedup as everywhere else (`1.23x [1.20, 1.26]`)."""
    spend: Spend = field(default_factory=Spend)
    events: list[str] = field(default_factory=list)
    inflight: dict[str, InFlight] = field(default_factory=dict)
    """Evaluations running now, by design id (short)."""

    def event(self, text: str) -> None:
        self.events = (self.events + [f"{time.strftime('%H:%M:%S')} {text}"])[-8:]


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    stop_reason: str
    best: DesignView | None
    """The best design, only when it beats eager by more than its interval."""
    best_path: Path | None
    iterations: int
    spend: Spend
    reference_ms: dict[str, float | None]
    no_gain: str | None = None
    """Why there is no best design (best/ then holds the reference)."""
    top: DesignView | None = None
    """The fastest ranked design, whether or not it beats eager."""


class SearchLoop:
    """One run directory's search."""

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
        self.spend = Spend.from_records(store.agent_calls(), store.evaluations())
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
        self._iteration: int | None = None
        self._iteration_ids: list[str] = []
        self._eval_lock = asyncio.Lock()
        self._inflight: dict[str, asyncio.Future[Feedback]] = {}
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
                self._source, self.store.tags())}
        return list(self._views.values())

    def _source(self, d: DesignRecord) -> str:
        return st.design_text(self.store, d)

    def _view(self, design_id: str) -> DesignView | None:
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
                                 self.store.tags(design_id)):
            self._views[v.id] = v

    def state(self, iteration: int) -> SearchState:
        facts = dict(get_domain(self.problem.domain).agent_facts(self.problem, self.cfg.evaluation))
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

    def _refresh(self) -> None:
        views = self.views()
        p = self.progress
        p.counts = counts_of(views)
        best = st.best_of(views)
        p.best_speedup, p.best_id = (best.speedup, best.id) if best else (None, None)
        noise = {"within noise": " (within noise)", "slower": " (slower than eager)"}.get(best.vs_eager() or "", "") if best else ""
        p.best_text = best.speedup_text() + noise if best else "-"
        if self.view is not None:
            self.view.update(p)

    # -- the Session a policy works through -----------------------------------------------

    async def evaluate(
        self, source: str, *, strategy: str, parents: Sequence[str] = (), author: str = "",
        tags: Mapping[str, Any] | None = None, files: Mapping[str, str] | None = None,
    ) -> Feedback:
        provenance = {"iteration": self._iteration, "strategy": strategy, "author": author or "unknown"}
        main = get_domain(self.problem.domain).main_file(self.problem)
        design = Design(files={**text_files(source, main), **dict(files or {})}, parent_ids=tuple(parents),
                        provenance=provenance)
        form = get_domain(self.problem.domain).normal_form(design.files)
        twin = self._twin(form, design.id)
        key = twin or design.id
        if self._iteration is not None and key not in self._iteration_ids:
            self._iteration_ids.append(key)
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
            fb = await self._evaluate_stored(design)
            fut.set_result(fb)
            return fb
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._inflight.pop(design.id, None)

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

    async def _evaluate_stored(self, design: Design) -> Feedback:
        self.progress.event(f"evaluating {design.id[:10]} ({design.provenance.get('author', '')})")
        self._refresh()
        # The speedup over eager is paired in the design's own worker; the chained ones use the
        # baselines this invocation measured before its first iteration.
        key = design.id[:10]
        expect = statistics.median(self._eval_s) if self._eval_s else None
        entry = InFlight(f"{key} ({design.provenance.get('author', '')})", "starting", time.time(), expect)
        self.progress.inflight[key] = entry

        def on_stage(name: str) -> None:
            entry.stage, entry.stage_since = name, time.time()
            self._refresh()

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
        view = self._view(design.id)
        speed = f" {view.speedup_text()}" if view is not None and view.speedup is not None else ""
        self.progress.event(f"{design.id[:10]} {fb.status}{speed}")
        self._refresh()
        return fb

    async def _maybe_review(self, design: Design, fb: Feedback) -> Feedback:
        """A design far faster than eager that would become the best is inspected first."""
        if fb.speedup is None or fb.speedup < self.cfg.agents.suspicious_speedup:
            return fb
        best = st.best_of([v for v in self.views() if v.id != design.id])
        if best is not None and best.speedup is not None and fb.speedup <= best.speedup:
            return fb
        view = self._view(design.id)
        return (await self._review(view) if view is not None else None) or fb

    async def _review(self, view: DesignView) -> Feedback | None:
        """The policy's review of `view`, stored; the resulting feedback (None: no reviewer)."""
        review = await self.policy.review(view, self.state(self._iteration or 0), self)
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
        now = self._view(view.id) or view
        return Feedback(view.id, now.status, now.report, now.runtime_ms, now.speedup)

    async def _retry_review(self) -> None:
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

    async def _retime_unstable(self) -> None:
        """Evaluate again the fastest design whose timing stayed unstable, if it would be the
        best (at most RETIMES_MAX more evaluations per design): until a stable re-timing
        exists, it is not ranked."""
        for v in self._would_lead("unstable"):
            if len(self.store.evaluations(v.id)) > RETIMES_MAX:
                continue
            rec = self.store.design(v.id)
            if rec is None:
                continue
            self.progress.event(f"re-timing {v.id[:10]} (unstable: {v.stability[:60]})")
            design = Design(files={n: self.store.get_artifact(h) for n, h in rec.files.items()},
                            parent_ids=tuple(rec.parent_ids), provenance=rec.provenance)
            await self._evaluate_stored(design)
            return

    def _feedback(self, design_id: str, ev: EvaluationRecord, reused: bool = False) -> Feedback:
        view = self._view(design_id)
        if view is not None and view.status in ("flagged", "unreviewed", "unstable"):
            return Feedback(design_id, view.status, view.report, view.runtime_ms, view.speedup, reused=reused)
        return Feedback(design_id, ev.status, st.report_of(ev),  # type: ignore[arg-type]
                        ev.runtime_ms, ev.speedup, reused=reused, **st.failure_info(ev))

    def record_call(self, call: AgentCall) -> None:
        self.store.add_agent_call(AgentCallRecord(
            iteration=self._iteration, role=call.role, model=call.model, prompt_hash=call.prompt_hash,
            input_tokens=call.input_tokens, output_tokens=call.output_tokens, requests=call.requests,
            cost_usd=call.cost_usd, latency_s=call.latency_s, retries=call.retries, ok=call.ok,
            error=call.error, messages_hash=self.store.put_artifact(call.messages_json),
            created_at=time.time(),
        ))
        self.spend.add_call(call)
        self.budgets.charge(call.requests)
        self._refresh()

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
        self._refresh()

    # -- the loop -------------------------------------------------------------------------

    async def measure_baseline(self) -> None:
        """Time the reference baselines afresh, once per invocation and before the first plan
        (so the first prompt has them). A reference that cannot be timed stops the run."""
        if self.baseline is not None:
            return
        if not get_domain(self.problem.domain).baselines(self.cfg.evaluation, self.evaluator.on_gpu):
            return  # a domain with no baselines: each design's reference is measured beside it
        self.progress.event("measuring the reference baselines")
        self.progress.inflight["baseline"] = InFlight("reference baselines", "compiling and timing eager, "
                                                      "torch.compile modes", time.time())
        self._refresh()
        try:
            base = await self.evaluator.baseline(self.problem, refresh=True)
        finally:
            self.progress.inflight.pop("baseline", None)
        if not base.modes or base.median_ms("eager") is None:
            failures = base.verdict.failures
            why = "; ".join(f"[{r.name}] {r.reason}" for r in failures) or "no eager timing"
            if any(r.kind == "problem_error" for r in failures) or not failures:
                raise ProblemError(f"{self.problem.name}: the reference cannot be timed in the harness, so "
                                   f"no design can be judged: {why}")
            raise HarnessError(f"measuring the reference baselines failed: {why}")
        self.baseline = base
        self.reference_ms = {m: base.median_ms(m) for m in base.modes}
        shown = ", ".join(f"{m} {v:.4g} ms" for m, v in self.reference_ms.items() if v is not None)
        unstable = base.unstable()
        note = f" (unstable: {', '.join(unstable)})" if unstable else ""
        self.progress.event(f"reference: {shown}{note}")
        self._refresh()

    async def recover(self) -> None:
        """Close iterations a killed run left open and evaluate designs it never evaluated."""
        for it in self.store.iterations():
            if it.status == "running":
                self.store.finish_iteration(it.n, "interrupted", it.plan, it.design_ids,
                                            "interrupted (the run was stopped mid-iteration)")
        for d in st.pending_designs(self.store.designs(self.problem.id), self.store.evaluations()):
            self._iteration = d.provenance.get("iteration")
            design = Design(files={n: self.store.get_artifact(h) for n, h in d.files.items()},
                            parent_ids=tuple(d.parent_ids), provenance=d.provenance)
            self.progress.event(f"resuming: {d.id[:10]} was never evaluated")
            await self._evaluate_stored(design)
        self._iteration = None

    def stop_reason(self) -> str | None:
        its = self.store.iterations()
        if len(its) >= self.cfg.search.iterations:
            return f"iterations ({len(its)} of {self.cfg.search.iterations})"
        patience = self.cfg.search.patience
        if patience is not None and st.stale_iterations(its, self.views()) >= patience:
            return f"patience ({patience} iterations without a new best)"
        return self.budgets.exhausted()

    async def run(self) -> RunOutcome:
        """Run iterations until a stop rule fires; Ctrl-C (cancellation) stops cleanly. A
        finished run whose policy had nothing more to propose, resumed with nothing pending,
        is reported as it is: nothing is added to it."""
        prev = self.store.run()
        if (prev is not None and prev.status == "finished" and prev.stop_reason == EXHAUSTED
                and not st.pending_designs(self.store.designs(self.problem.id), self.store.evaluations())):
            return self.outcome(EXHAUSTED)
        self.store.set_run_status("running")
        reason = "interrupted"
        try:
            pending = st.pending_designs(self.store.designs(self.problem.id), self.store.evaluations())
            if pending or self.stop_reason() is None:  # a finished run resumed measures nothing
                await self.measure_baseline()
            await self.recover()
            while (r := self.stop_reason()) is None:
                n = len(self.store.iterations()) + 1
                exhausted = await self._iterate(n)
                if exhausted:
                    r = EXHAUSTED
                    break
            reason = r
            await self.confirm()
            self.store.set_run_status("finished", reason)
        except (asyncio.CancelledError, KeyboardInterrupt):
            self._close_iteration("interrupted", "interrupted by the user")
            self.store.set_run_status("interrupted", "interrupted by the user")
            raise
        except BaseException as e:
            self._close_iteration("interrupted", f"stopped by an error: {e}")
            self.store.set_run_status("interrupted", f"{type(e).__name__}: {e}")
            raise
        return self.outcome(reason)

    async def _iterate(self, n: int) -> bool:
        self._iteration, self._iteration_ids = n, []
        self.progress.iteration, self.progress.workers = n, {}
        self.store.start_iteration(n, {})
        self.progress.event(f"iteration {n} started")
        self._refresh()
        await self._retry_review()
        await self._retime_unstable()
        result = await self.policy.iterate(self.state(n), self)
        ids = list(dict.fromkeys([*result.design_ids, *self._iteration_ids]))
        plan = result.plan.to_json() if result.plan else None
        if result.plan is not None:
            self.progress.strategy = result.plan.strategy
        ctx = {k: list(v) for k, v in result.context_ids.items()}
        self.store.finish_iteration(n, "done", plan, ids, result.note, ctx or None)
        self.progress.event(f"iteration {n} done: {len(ids)} designs")
        self._iteration = None
        self._refresh()
        return result.exhausted

    def _close_iteration(self, status: str, note: str) -> None:
        if self._iteration is None:
            return
        self.store.finish_iteration(self._iteration, status, None, list(self._iteration_ids), note)
        self._iteration = None

    async def confirm(self) -> None:
        """The confirmation round at the end of a run (`search/confirm.py`): skipped when off
        (`confirm_top = 0`), when the run has a device or wall budget (a limit the user set is a
        limit, and a round's length is not known ahead), or when the run's latest round already
        covers the designs it would pick; a round that fails is said, and the search-time
        figures stay the headline."""
        from stratagem.errors import StratagemError
        from stratagem.search.confirm import chosen, confirm_run

        top = self.cfg.search.confirm_top
        if top <= 0:
            return
        s = self.cfg.search
        if s.max_gpu_seconds is not None or s.max_wall_seconds is not None:
            self.progress.event("not confirmed: the run has a device or wall budget, which a round would "
                                f"exceed; `stratagem confirm {self.store.run_dir}` re-times the best designs")
            return
        picked = {v.id for v in chosen(self.views(), top)}
        rounds = self.store.confirmations()
        if not picked or (rounds and picked <= {str(d.get("design_id")) for d in rounds[-1].get("designs") or ()}):
            return
        entry = InFlight("confirmation", "starting", time.time())
        self.progress.inflight["confirm"] = entry

        def said(text: str) -> None:
            entry.stage, entry.stage_since = text, time.time()
            self.progress.event(text)
            self._refresh()

        try:
            await confirm_run(self.store, self.problem, self.evaluator, top=top,
                              blocks=self.cfg.search.confirm_blocks, on_progress=said)
            self.progress.event("confirmed: the best designs re-timed together (`stratagem show` heads with them)")
        except StratagemError as e:
            self.progress.event(f"the confirmation round failed ({e}); the search-time figures stand")
        finally:
            self.progress.inflight.pop("confirm", None)
            self._refresh()

    def outcome(self, reason: str) -> RunOutcome:
        """The run's result. `best/candidate.py` holds the best design only when it beats the
        eager reference by more than its measurement's interval; otherwise it holds the
        reference itself (as a `ModelNew`), and `best` is None with `no_gain` saying why."""
        views = st.with_confirmation(self.views(), self.store.confirmations())
        top = st.best_of(views)
        best = top if top is not None and top.beats_reference else None
        path = self.store.run_dir / "best" / "candidate.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        no_gain = None
        if best is not None:
            env = next((e.environment for e in reversed(self.store.evaluations()) if e.design_id == best.id), {})
            device = str(env.get("device_name") or env.get("device") or self.cfg.evaluation.device)
            path.write_text(exported_source(best, self.problem.name, self.store.run_dir, device,
                                            self.reference_ms or None, self.problem.domain), encoding="utf-8")
        else:
            no_gain = no_gain_note(top)
            path.write_text(get_domain(self.problem.domain).reference_design(self.problem.source, no_gain),
                            encoding="utf-8")
        ref = self.reference_ms or _reference_from(self.store.evaluations())
        return RunOutcome(run_dir=self.store.run_dir, stop_reason=reason, best=best, best_path=path,
                          iterations=len(self.store.iterations()), spend=self.spend, reference_ms=ref,
                          no_gain=no_gain, top=top)


def no_gain_note(top: DesignView | None) -> str:
    """Why a run has no best design, in one sentence."""
    if top is None:
        return "no valid, stably timed design was found"
    return (f"no design beats the eager reference by more than its measurement's interval (the "
            f"fastest, {top.id[:10]}, measured {top.speedup_text()} vs eager)")


def _reference_from(evaluations: Sequence[EvaluationRecord]) -> dict[str, Any]:
    for ev in reversed(evaluations):
        if ev.reference_ms:
            return dict(ev.reference_ms)
    return {}
