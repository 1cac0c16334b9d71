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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from stratagem.config import StratagemConfig
from stratagem.core.design import Design
from stratagem.core.problem import Problem
from stratagem.domains.pytorch import domain
from stratagem.errors import HarnessError, ProblemError
from stratagem.evaluation.service import Evaluator
from stratagem.search import state as st
from stratagem.search.budget import Budgets, Spend
from stratagem.search.types import AgentCall, DesignView, Feedback, Policy, SearchState
from stratagem.store.records import AgentCallRecord, DesignRecord, EvaluationRecord, ReviewRecord
from stratagem.store.sqlite import RunStore

HARNESS_FAILURES_MAX = 3
"""Consecutive evaluations failing with `harness_error` (broken infrastructure) that stop a run."""


class RunView(Protocol):
    """Where the loop reports progress (the rich live view, or nothing)."""

    def update(self, snapshot: Progress) -> None: ...


@dataclass
class Progress:
    """What the live view shows."""

    problem: str
    policy: str
    iteration: int = 0
    iterations: int = 0
    strategy: str = ""
    workers: dict[str, str] = field(default_factory=dict)
    valid: int = 0
    invalid: int = 0
    best_speedup: float | None = None
    best_id: str | None = None
    spend: Spend = field(default_factory=Spend)
    events: list[str] = field(default_factory=list)

    def event(self, text: str) -> None:
        self.events = (self.events + [f"{time.strftime('%H:%M:%S')} {text}"])[-8:]


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    stop_reason: str
    best: DesignView | None
    best_path: Path | None
    iterations: int
    spend: Spend
    reference_ms: dict[str, float | None]


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
        self.progress = Progress(problem=problem.name, policy=policy.name, iterations=cfg.search.iterations,
                                 spend=self.spend)
        self.reference_ms: dict[str, float | None] = {}
        self._baseline_fresh = False
        """Whether this invocation measured the baselines itself (not from the disk cache)."""
        self._iteration: int | None = None
        self._iteration_ids: list[str] = []
        self._eval_lock = asyncio.Lock()
        self._inflight: dict[str, asyncio.Future[Feedback]] = {}
        self._views: dict[str, DesignView] | None = None
        self._harness_failures = 0

    # -- state ----------------------------------------------------------------------------

    def views(self) -> list[DesignView]:
        """Every evaluated design, oldest first (kept in memory, updated as verdicts arrive, so
        an iteration's cost does not grow with the size of the run)."""
        if self._views is None:
            self._views = {v.id: v for v in st.design_views(
                self.store.designs(self.problem.id), self.store.evaluations(), self.store.reviews(),
                self._source)}
        return list(self._views.values())

    def _source(self, d: DesignRecord) -> str:
        return self.store.get_artifact(d.files["candidate.py"])

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
        for v in st.design_views([rec], self.store.evaluations(design_id), reviews, self._source):
            self._views[v.id] = v

    def state(self, iteration: int) -> SearchState:
        return SearchState(
            problem=self.problem, designs=tuple(self.views()), iteration=iteration,
            reference_ms=dict(self.reference_ms), device=self.evaluator.physical_device,
            tolerances=domain.tolerances(self.problem, self.cfg.evaluation),
        )

    def _refresh(self) -> None:
        views = self.views()
        p = self.progress
        p.valid = sum(v.status in ("valid", "unreviewed") for v in views)
        p.invalid = len(views) - p.valid
        best = st.best_of(views)
        p.best_speedup, p.best_id = (best.speedup, best.id) if best else (None, None)
        if self.view is not None:
            self.view.update(p)

    # -- the Session a policy works through -----------------------------------------------

    async def evaluate(
        self, source: str, *, strategy: str, parents: Sequence[str] = (), author: str = ""
    ) -> Feedback:
        design = Design.from_source(source, parent_ids=tuple(parents), provenance={
            "iteration": self._iteration, "strategy": strategy, "author": author or "unknown",
        })
        if self._iteration is not None and design.id not in self._iteration_ids:
            self._iteration_ids.append(design.id)
        done = self.store.evaluations(design.id)
        if done:
            return self._feedback(design.id, done[-1], reused=True)
        if design.id in self._inflight:  # two agents wrote the same file at once
            fb = await asyncio.shield(self._inflight[design.id])
            return Feedback(fb.design_id, fb.status, fb.report, fb.runtime_ms, fb.speedup, reused=True)
        fut: asyncio.Future[Feedback] = asyncio.get_running_loop().create_future()
        self._inflight[design.id] = fut
        try:
            self.store.add_design(self.problem.id, design)
            fb = await self._evaluate_stored(design)
            fut.set_result(fb)
            return fb
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._inflight.pop(design.id, None)

    async def _evaluate_stored(self, design: Design) -> Feedback:
        self.progress.event(f"evaluating {design.id[:10]} ({design.provenance.get('author', '')})")
        self._refresh()
        # Speedups are ratios measured in the same run: the first baseline of an invocation is
        # measured afresh, never taken from a cache filled under other load (or another day).
        ev = await self.evaluator.evaluate(self.problem, design, refresh_baseline=not self._baseline_fresh)
        if ev.baseline is not None and not ev.baseline.cached and ev.baseline.modes:
            self._baseline_fresh = True
        rec = ev.to_record()
        self.store.add_evaluation(rec)
        self._update_view(design.id)
        self.spend.add_evaluation(rec)
        if ev.reference_ms:
            self.reference_ms = dict(ev.reference_ms)
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
        speed = f" {fb.speedup:.2f}x" if fb.speedup is not None else ""
        self.progress.event(f"{design.id[:10]} {fb.status}{speed}")
        self._refresh()
        return fb

    async def _maybe_review(self, design: Design, fb: Feedback) -> Feedback:
        """A design far faster than eager that would become the best is inspected first."""
        if fb.speedup is None or fb.speedup < self.cfg.agents.suspicious_speedup:
            return fb
        best = st.best_of([v for v in self.views() if v.id != design.id])
        if best is not None and best.runtime_ms is not None and (fb.runtime_ms or 0) >= best.runtime_ms:
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
        views = self.views()
        best = st.best_of(views)
        waiting = [v for v in views if v.status == "unreviewed" and v.runtime_ms is not None
                   and (best is None or best.runtime_ms is None or v.runtime_ms < best.runtime_ms)]
        if waiting:
            fastest = min(waiting, key=lambda v: v.runtime_ms or 0.0)
            self.progress.event(f"retrying the review of {fastest.id[:10]}")
            await self._review(fastest)

    def _feedback(self, design_id: str, ev: EvaluationRecord, reused: bool = False) -> Feedback:
        view = self._view(design_id)
        if view is not None and view.status in ("flagged", "unreviewed"):
            return Feedback(design_id, view.status, view.report, view.runtime_ms, view.speedup, reused=reused)
        return Feedback(design_id, ev.status, st.report_of(ev),  # type: ignore[arg-type]
                        ev.runtime_ms, ev.speedup, reused=reused)

    def record_call(self, call: AgentCall) -> None:
        self.store.add_agent_call(AgentCallRecord(
            iteration=self._iteration, role=call.role, model=call.model, prompt_hash=call.prompt_hash,
            input_tokens=call.input_tokens, output_tokens=call.output_tokens, requests=call.requests,
            cost_usd=call.cost_usd, latency_s=call.latency_s, retries=call.retries, ok=call.ok,
            error=call.error, messages_hash=self.store.put_artifact(call.messages_json),
            created_at=time.time(),
        ))
        self.spend.add_call(call)
        self._refresh()

    def budget_left(self) -> str | None:
        return self.budgets.exhausted()

    def set_status(self, worker: str, status: str) -> None:
        self.progress.workers[worker] = status
        self._refresh()

    # -- the loop -------------------------------------------------------------------------

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
        """Run iterations until a stop rule fires; Ctrl-C (cancellation) stops cleanly."""
        self.store.set_run_status("running")
        reason = "interrupted"
        try:
            await self.recover()
            while (r := self.stop_reason()) is None:
                n = len(self.store.iterations()) + 1
                exhausted = await self._iterate(n)
                if exhausted:
                    r = "the policy has nothing more to propose"
                    break
            reason = r
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

    def outcome(self, reason: str) -> RunOutcome:
        views = self.views()
        best = st.best_of(views)
        path = None
        if best is not None:
            path = self.store.run_dir / "best" / "candidate.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(best.source, encoding="utf-8")
        ref = self.reference_ms or _reference_from(self.store.evaluations())
        return RunOutcome(run_dir=self.store.run_dir, stop_reason=reason, best=best, best_path=path,
                          iterations=len(self.store.iterations()), spend=self.spend, reference_ms=ref)


def _reference_from(evaluations: Sequence[EvaluationRecord]) -> dict[str, Any]:
    for ev in reversed(evaluations):
        if ev.reference_ms:
            return dict(ev.reference_ms)
    return {}
