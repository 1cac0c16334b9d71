"""Owns the run loop: iterations of a policy over one problem, stop rules (iterations,
patience, budgets, an exhausted policy), recovery of a killed run, the confirmation round,
Ctrl-C and a queue no worker serves (`QueueStalled`: stopped as Ctrl-C stops it). The Session
the policy works through (storing designs and verdicts, reviews, budgets, the live view's
progress) is `search/session.py`.

Every write goes to the store as it happens (designs before they are evaluated, verdicts as
they come back, agent calls when they end), so a run killed at any point, even with SIGKILL,
resumes from its database: designs stored but never evaluated are evaluated first, a design's
content hash is its identity (never stored or evaluated twice), and an iteration left
`running` is closed as `interrupted`.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from stratagem.core.design import Design, text_files
from stratagem.core.inflight import InFlight
from stratagem.core.search import DesignView
from stratagem.domains import get_domain, names_of
from stratagem.errors import HarnessError, ProblemError, QueueStalled
from stratagem.evaluation.sandbox import reraise_lost_cancel
from stratagem.search import state as st
from stratagem.search.budget import Spend
from stratagem.search.export import exported_files, write_files
from stratagem.search.headline import Headline, headline_of
from stratagem.search.progress import Progress, RunView
from stratagem.search.session import HARNESS_FAILURES_MAX, RETIMES_MAX, RunSession

__all__ = ["EXHAUSTED", "HARNESS_FAILURES_MAX", "RETIMES_MAX", "InFlight", "Progress", "RunOutcome", "RunView",
           "SearchLoop"]

EXHAUSTED = "the policy has nothing more to propose"


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    stop_reason: str
    best: DesignView | None
    """The best design, only when it beats the reference by more than its interval."""
    best_path: Path | None
    iterations: int
    spend: Spend
    reference_ms: dict[str, float | None]
    no_gain: str | None = None
    """Why there is no best design (best/ then holds the reference)."""
    top: DesignView | None = None
    """The fastest ranked design, whether or not it beats the reference."""
    headline: Headline | None = None
    """The run's result as every view says it (`search/headline.py`)."""


class SearchLoop:
    """One run directory's search: the driver of a `RunSession` (`loop.session`, which holds
    the run's state: its views, spend, budgets, progress and baselines)."""

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.cfg, self.problem, self.store = session.cfg, session.problem, session.store

    # -- the loop -------------------------------------------------------------------------

    async def measure_baseline(self) -> None:
        """Time the reference baselines afresh, once per invocation and before the first plan
        (so the first prompt has them). A reference that cannot be timed stops the run."""
        if self.session.baseline is not None:
            return
        if get_domain(self.problem.domain).baselines is None:
            return  # a domain with no baselines: each design's reference is measured beside it
        self.session.progress.event("measuring the reference baselines")
        entry = InFlight("reference baselines", "starting", time.time())
        self.session.progress.inflight["baseline"] = entry

        def staged(name: str) -> None:
            entry.stage, entry.stage_since = name, time.time()
            self.session.refresh()

        self.session.refresh()
        if self.cfg.agents.model is not None:
            self.session.prefetch("profile")  # the agents' first look, asked beside the baselines
        try:
            base = await self.session.evaluator.baseline(self.problem, refresh=True, on_stage=staged)
        finally:
            self.session.progress.inflight.pop("baseline", None)
        if not base.modes or base.reference_ms is None:
            failures = base.verdict.failures
            why = "; ".join(f"[{r.name}] {r.reason}" for r in failures) or "no timing of the reference"
            if any(r.kind == "problem_error" for r in failures) or not failures:
                raise ProblemError(f"{self.problem.name}: the reference cannot be timed in the harness, so "
                                   f"no design can be judged: {why}")
            raise HarnessError(f"measuring the reference baselines failed: {why}")
        self.session.baseline = base
        self.session.reference_ms = {m: base.median_ms(m) for m in base.modes}
        shown = ", ".join(f"{m} {v:.4g} ms" for m, v in self.session.reference_ms.items() if v is not None)
        unstable = base.unstable()
        note = f" (unstable: {', '.join(unstable)})" if unstable else ""
        self.session.progress.event(f"reference: {shown}{note}")
        self.session.refresh()

    async def recover(self) -> None:
        """Close iterations a killed run left open and evaluate designs it never evaluated."""
        for it in self.store.iterations():
            if it.status == "running":
                self.store.finish_iteration(it.n, "interrupted", it.plan, it.design_ids,
                                            "interrupted (the run was stopped mid-iteration)")
        for d in st.pending_designs(self.store.designs(self.problem.id), self.store.evaluations()):
            self.session.iteration = d.provenance.get("iteration")
            design = Design(files={n: self.store.get_artifact(h) for n, h in d.files.items()},
                            parent_ids=tuple(d.parent_ids), provenance=d.provenance)
            self.session.progress.event(f"resuming: {d.id[:10]} was never evaluated")
            await self.session.evaluate_stored(design)
        self.session.iteration = None

    def stop_reason(self) -> str | None:
        its = self.store.iterations()
        if len(its) >= self.cfg.search.iterations:
            return f"iterations ({len(its)} of {self.cfg.search.iterations})"
        patience = self.cfg.search.patience
        if patience is not None and st.stale_iterations(its, self.session.views()) >= patience:
            return f"patience ({patience} iterations without a new best)"
        return self.session.budgets.exhausted()

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
            reason = await self._search()
            await self.confirm()
            self.store.set_run_status("finished", reason)
        except (asyncio.CancelledError, KeyboardInterrupt):
            self._close_iteration("interrupted", "interrupted by the user")
            self.store.set_run_status("interrupted", "interrupted by the user")
            raise
        except QueueStalled as e:  # no worker serves the queue: stopped cleanly, `resume` continues
            self.session.progress.event("stopped: no queue worker came within evaluation.queue_wait_s")
            self.session.refresh()
            self._close_iteration("interrupted", "stopped waiting for a queue worker; designs it had not evaluated "
                                  "stay pending for `stratagem resume`")
            self.store.set_run_status("interrupted", f"waiting for a queue worker: {e}")
            raise
        except BaseException as e:
            self._close_iteration("interrupted", f"stopped by an error: {e}")
            self.store.set_run_status("interrupted", f"{type(e).__name__}: {e}")
            raise
        return self.outcome(reason)

    async def _search(self) -> str:
        """The baselines, what a killed run left, then iterations until a stop rule fires; its
        reason. The wall budget (`max_wall_seconds`) is a deadline: work in flight when it ends
        (an evaluation, an agent's call, the baselines) is stopped there as Ctrl-C stops it
        (workers killed), its iteration closed, and a design it had not evaluated stays pending
        (`stratagem resume` evaluates it)."""
        deadline = asyncio.timeout(self.session.budgets.remaining().wall_seconds)
        try:
            async with deadline:
                pending = st.pending_designs(self.store.designs(self.problem.id), self.store.evaluations())
                if pending or self.stop_reason() is None:  # a finished run resumed measures nothing
                    await self.measure_baseline()
                await self.recover()
                while (r := self.stop_reason()) is None:
                    if await self._iterate(len(self.store.iterations()) + 1):
                        return EXHAUSTED
                return r
        except TimeoutError:
            if not deadline.expired():
                raise
            b = self.session.budgets
            reason = b.exhausted() or f"max_wall_seconds ({b.wall_seconds:.4g} of {self.cfg.search.max_wall_seconds:g})"
            self.session.progress.event(f"stopped at the wall budget: {reason}; work in flight was stopped")
            self.session.refresh()
            self._close_iteration("interrupted", f"stopped at the wall budget ({reason}) mid-iteration; "
                                  "designs it had not evaluated stay pending for `stratagem resume`")
            return reason

    async def _iterate(self, n: int) -> bool:
        self.session.iteration, self.session.iteration_ids = n, []
        self.session.progress.iteration, self.session.progress.workers = n, {}
        self.store.start_iteration(n, {})
        self.session.progress.event(f"iteration {n} started")
        self.session.refresh()
        await self.session.retry_review()
        await self.session.retime_unstable()
        result = await self.session.policy.iterate(self.session.state(n), self.session)
        reraise_lost_cancel()  # a Ctrl-C something below swallowed still stops the run here
        ids = list(dict.fromkeys([*result.design_ids, *self.session.iteration_ids]))
        plan = result.plan.to_json() if result.plan else None
        if result.plan is not None:
            self.session.progress.strategy = result.plan.strategy
        ctx = {k: list(v) for k, v in result.context_ids.items()}
        self.store.finish_iteration(n, "done", plan, ids, result.note, ctx or None)
        self.session.progress.event(f"iteration {n} done: {len(ids)} designs")
        self.session.iteration = None
        self.session.refresh()
        return result.exhausted

    def _close_iteration(self, status: str, note: str) -> None:
        if self.session.iteration is None:
            return
        self.store.finish_iteration(self.session.iteration, status, None, list(self.session.iteration_ids), note)
        self.session.iteration = None

    async def confirm(self) -> None:
        """The confirmation round at the end of a run (`search/confirm.py`): skipped when off
        (`confirm_top = 0`), when the run has a device or wall budget (a limit the user set is a
        limit, and a round's length is not known ahead), or when the run's latest round already
        covers the designs it would pick; a round that fails is said, and the search-time
        figures stay the headline."""
        from stratagem.errors import StratagemError
        from stratagem.search.confirm import chosen, confirm_run

        top = self.cfg.search.confirm_top
        if top <= 0 or "confirm" not in get_domain(self.problem.domain).graphs:  # off, or the domain has no round
            return
        s = self.cfg.search
        if s.max_gpu_seconds is not None or s.max_wall_seconds is not None:
            self.session.progress.event("not confirmed: the run has a device or wall budget, which a round would "
                                f"exceed; `stratagem confirm {self.store.run_dir}` re-times the best designs")
            return
        picked = {v.id for v in chosen(self.session.views(), top)}
        rounds = self.store.confirmations()
        if not picked or (rounds and picked <= {str(d.get("design_id")) for d in rounds[-1].get("designs") or ()}):
            return
        entry = InFlight("confirmation", "starting", time.time())
        self.session.progress.inflight["confirm"] = entry

        def said(text: str) -> None:  # the round's stages, block by block, as its in-flight line
            entry.stage, entry.stage_since = text, time.time()
            self.session.refresh()

        self.session.progress.event(f"confirming the best {top} designs in {self.cfg.search.confirm_blocks} independent blocks")

        try:
            await confirm_run(self.store, self.problem, self.session.evaluator, top=top,
                              blocks=self.cfg.search.confirm_blocks, on_progress=said)
            self.session.progress.event("confirmed: the best designs re-timed together (`stratagem show` heads with them)")
        except QueueStalled:
            raise  # the run stops here; `resume` runs the round
        except StratagemError as e:
            self.session.progress.event(f"the confirmation round failed ({e}); the search-time figures stand")
        finally:
            self.session.progress.inflight.pop("confirm", None)
            self.session.refresh()

    def outcome(self, reason: str) -> RunOutcome:
        """The run's result (its `Headline`). `best/` holds the best design's own files (headed
        by where they came from, `search/export.py`) only when it beats the reference by more
        than its measurement's interval; otherwise it holds the reference itself, and `best` is
        None with `no_gain` saying why."""
        names = names_of(self.problem.domain)
        head = headline_of(st.with_confirmation(self.session.views(), self.store.confirmations(), names), names)
        top, best = head.top, head.best
        domain = get_domain(self.problem.domain)
        main = domain.main_file(self.problem)
        no_gain = None
        if best is not None:
            env = next((e.environment for e in reversed(self.store.evaluations()) if e.design_id == best.id), {})
            device = str(env.get("device_name") or env.get("device") or self.cfg.evaluation.device)
            files = exported_files(best, self.problem.name, self.store.run_dir, device,
                                   self.session.reference_ms or None, self.problem.domain, main)
        else:
            no_gain = head.no_gain()
            files = text_files(domain.reference_design(self.problem.source, no_gain), main)
        where = self.store.run_dir / "best"
        if where.is_dir():  # a resumed run's earlier best goes: best/ is this outcome's only
            shutil.rmtree(where)
        write_files(files, where, directory=True)
        path = where / main if len(files) == 1 and main in files else where
        ref = self.session.reference_ms or st.reference_from(self.store.evaluations(), names.key)
        return RunOutcome(run_dir=self.store.run_dir, stop_reason=reason, best=best, best_path=path,
                          iterations=len(self.store.iterations()), spend=self.session.spend, reference_ms=ref,
                          no_gain=no_gain, top=top, headline=head)
