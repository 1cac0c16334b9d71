"""Owns evaluating one design against one problem: the validator graph, end to end.

Parent-placed validators run inline; worker-placed ones in one fresh sandboxed worker on the
executor. The speedup over the reference is the paired ratio the design's own worker timed
(alternating blocks, with its interval); over the domain's other baseline modes it is chained
with the baseline worker's reference/mode ratio (`evaluation/baselines.py`): design/mode =
(reference/design) / (reference/mode). A baseline is kept only for the slot it was measured
on (another machine's or device's, or an unstable cached one, gives way to the slot's own). A
domain's optional capabilities run only where it has them: device peaks, reference facts,
prebuild, audit, confirmation. See docs/timing.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from stratagem.config import EvaluationConfig, cache_dir
from stratagem.core.design import Design
from stratagem.core.graph import GraphRun, ValidatorGraph, ValidatorSpec
from stratagem.core.problem import Problem
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.domains import get_domain
from stratagem.domains.base import Domain, Task
from stratagem.errors import HarnessError
from stratagem.evaluation.baselines import BaselineCache, Baselines, own, slot_of
from stratagem.evaluation.executors import Executor
from stratagem.evaluation.outcome import interpret
from stratagem.evaluation.peaks import DevicePeaks
from stratagem.evaluation.progress import owned, stage_events
from stratagem.evaluation.results import Baseline, Evaluation
from stratagem.evaluation.sandbox import reraise_lost_cancel
from stratagem.evaluation.submit import submitted
from stratagem.worker_api.protocol import EvalRequest


@dataclass
class _Attempt:
    """One evaluation's state between its steps."""

    design: Design
    domain: Domain
    task: Task  # the domain opened on the problem (`Domain.open`): `task.problem`
    timeout_s: float | None
    stage: Callable[[str], None]
    baseline: Baseline | None
    ran_on: str
    """The physical device of the slot the worker ran in (the parent-side steps after it, the
    roofline above all, use that device's identity)."""
    ran_host: str | None
    """The machine of that slot (None before a remote worker answered)."""
    environment: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    sandbox: dict[str, Any] = field(default_factory=dict)
    limit: float | None = None
    """The run limit, fitted to the reference's time where a baseline is known (else the
    default, while `pending` measures the baseline beside the worker: `_batch`)."""
    pending: asyncio.Task[Baseline] | None = None


class Evaluator:
    """Runs designs through the harness on an executor."""

    def __init__(self, cfg: EvaluationConfig, executor: Executor, physical_device: str | None = None) -> None:
        self.cfg = cfg
        self.executor = executor
        self.physical_device = physical_device or executor.devices()[0]
        """The first device: what `baseline`, `audit` and `calibrate` run on when not told."""
        self.baselines = Baselines(cfg, executor, self.physical_device, self.run_reference_graph)
        self.peaks = DevicePeaks(cfg, executor, self.physical_device, self.run_reference_graph)
        self.facts = BaselineCache(cache_dir(cfg) / "reference_facts")
        """What a worker measured of the reference alone (`Domain.reference_facts`), per problem:
        kept so that no later evaluation measures it again (PyTorch: its FLOP count, which
        costs every process that counts it 4-5 s of imports on an H200)."""

    @property
    def on_gpu(self) -> bool:
        return self.physical_device.startswith("cuda")

    async def evaluate(
        self, problem: Problem, design: Design, *, with_baseline: bool = True, timeout_s: float | None = None,
        refresh_baseline: bool = False, baseline: Baseline | None = None,
        on_stage: Callable[[str], None] | None = None, graph: ValidatorGraph | None = None,
    ) -> Evaluation:
        """Run the validator graph on `design` (the domain's, or `graph`: a writer's tool from
        `Domain.graphs`); for a valid, timed design, attach the reference baselines: `baseline`
        when given (a search's, once per invocation; its reference median is also the
        reference-drift check's expectation) and measured on the design's slot, else that
        slot's own (afresh once per invocation for a search; else from the cache unless
        `refresh_baseline`). `on_stage` hears each stage's name as it starts."""
        t0 = time.monotonic()
        task = (domain := get_domain(problem.domain)).open(problem, self.cfg)
        run = GraphRun(graph or task.validator_graph(), batch_placement="worker")
        a = _Attempt(design, domain, task, timeout_s, on_stage or (lambda _name: None), baseline,
                     self.physical_device, self.executor.host())
        a.environment.update(await self._prebuild(a))  # {"prebuild": ...} or {}
        while (step := run.next_step()) is not None:
            if step.kind == "inline":
                run.record([await self._inline(a, step.specs[0], {r.name: r for r in run.results})])
                continue
            if a.limit is None:
                self._run_limit(a, with_baseline and baseline is None, refresh_baseline)
            run.record(await self._batch(a, step.specs))
            run.record_missing(step.specs, "the worker ended before this stage ran")
        reraise_lost_cancel()  # the verdict of an evaluation Ctrl-C stopped is never kept
        verdict = Verdict(run.results)
        final = await self._attached(a, baseline, verdict, with_baseline, refresh_baseline)
        return Evaluation(problem=problem, design=design, verdict=verdict, device=a.ran_on,
                          environment=a.environment, seeds=a.seeds, baseline=final, sandbox=a.sandbox,
                          wall_s=time.monotonic() - t0)

    async def _inline(self, a: _Attempt, spec: ValidatorSpec, earlier: Mapping[str, ValidatorResult]) -> ValidatorResult:
        """A parent-placed validator; one that reads the device's peaks gets them calibrated."""
        a.stage(spec.name)
        s0 = time.monotonic()
        peaks = a.domain.peaks
        if peaks is not None and peaks.reads_peaks(spec.name):
            if not self.peaks.known(a.ran_on, a.ran_host):
                a.stage("calibrating the device's peaks (once per machine)")
            r = await self.peaks.checked(a.task, peaks, spec.name, a.design, earlier, a.ran_on, a.ran_host)
        else:
            r = a.task.run_parent_validator(spec.name, a.design, earlier, None, a.ran_on)
        return ValidatorResult(r.name, r.outcome, r.reason, r.kind, r.details, time.monotonic() - s0)

    def _request(self, a: _Attempt, specs: Any, baseline: Baseline | None) -> EvalRequest:
        """The design's worker request, told the reference's time in this invocation's baseline."""
        req = owned(a.task.build_request(a.design, specs), a.design.id[:10])
        if baseline is not None and baseline.reference_ms:
            req = a.task.with_reference_expectation(req, baseline.reference_ms)
        return req

    async def _batch(self, a: _Attempt, specs: Any) -> list[ValidatorResult]:
        """The worker-placed stages in one sandboxed worker (`submitted`: run again alone if it
        ran out of memory). One cut at a provisional run limit runs again under the limit its
        (now measured) baseline implies, when that is larger. The last run stands; the runs
        before it are charged (`earlier_runs_s` in the environment)."""
        rf, facts_key = a.domain.reference_facts, f"{a.task.problem.domain}-{a.task.problem.id}"
        req = self._request(a, specs, a.baseline if a.baseline is not None and not a.baseline.cached else None)
        facts = self.facts.get(facts_key) if rf is not None else None
        if rf is not None and facts is not None:
            req = rf.told(req, facts["facts"])
        on_event = stage_events(a.stage)
        compile_limit = a.task.compile_timeout_s(a.timeout_s)
        limit = a.limit or self.cfg.timeout_s
        run = await submitted(self.executor, req, specs, limit, compile_limit, on_event, beside=a.pending)
        if a.pending is not None and run.result.timed_out and run.result.limit_hit == "run":
            a.baseline, a.pending = await a.pending, None  # the baseline now says what fits the problem
            fitted = a.task.timeout_s(a.timeout_s, a.baseline.reference_ms)
            if fitted > limit:
                req, limit, spent = self._request(a, specs, a.baseline), fitted, run.earlier_s + run.result.duration_s
                on_event({"event": "start", "stage": f"again under a {fitted:.0f} s run limit (the reference is slow)"})
                run = await submitted(self.executor, req, specs, fitted, compile_limit, on_event)
                run = replace(run, earlier_s=run.earlier_s + spent)
        req, slot, sr, out, earlier_s = run.request, run.slot, run.result, run.out, run.earlier_s
        a.seeds, a.ran_on, a.ran_host, a.limit = a.task.request_seeds(req), slot.physical, slot.host, limit
        results = out.results
        if rf is not None and facts is not None:
            results = rf.applied(results, facts["facts"])
        elif rf is not None and (found := rf.of(results)) is not None:
            self.facts.put(facts_key, {"problem": a.task.problem.name, "facts": found})
        a.environment.update(out.environment)
        a.environment.update(host=slot.host, physical_device=slot.physical, **({"alone": True} if req.alone else {}),
                             **({"earlier_runs_s": round(earlier_s, 3)} if earlier_s else {}))
        a.sandbox = {
            "returncode": sr.returncode, "signal": sr.signal_name, "timed_out": sr.timed_out,
            "duration_s": sr.duration_s, "network_isolated": sr.network_isolated,
            "strays_killed": sr.strays_killed, "run_limit_s": limit,
            "lock_wait_s": round((sr.phase_s or {}).get("wait", 0.0), 3),
        }
        return results

    def _run_limit(self, a: _Attempt, wanted: bool, refresh: bool) -> None:
        """The baseline known now (the given one, or the cache's when `wanted`), the task
        measuring it beside the worker when it must be measured, and the run limit."""
        if wanted:
            a.baseline = None if refresh else self.baselines.cached(a.task.problem) or self.baselines.provisional(a.task.problem)
            if a.baseline is None:  # measured beside the design's worker, not before it
                a.pending = asyncio.create_task(self.baseline(a.task.problem, timeout_s=a.timeout_s, refresh=True))
        ms = a.baseline.reference_ms if a.baseline is not None else None
        a.limit = a.task.timeout_s(a.timeout_s, ms)

    async def _attached(self, a: _Attempt, given: Baseline | None, verdict: Verdict, with_baseline: bool,
                        refresh: bool) -> Baseline | None:
        """The baseline a design keeps: the caller's (a search's), or one found or measured here,
        only if it is the own of the slot the design's worker reports."""
        baseline = a.baseline
        if a.pending is not None:
            if not a.pending.done():
                a.stage("waiting for the reference baselines (timed beside the design)")
            baseline = await a.pending
        if baseline is not None and not own(baseline, a.environment):
            # another machine's or device's (the search's own included: a run on a cluster or
            # on several GPUs), or unstable: this slot's own is looked up (or measured) below
            baseline = self.baselines.fresh.get((a.task.problem.id, *slot_of(a.environment))) if given is not None else None
        if baseline is None and with_baseline and verdict.status == "valid" and a.domain.measure(verdict) is not None:
            # a search's baseline is measured afresh once per invocation: on every slot it meets
            baseline = await self.baseline(a.task.problem, environment=a.environment, timeout_s=a.timeout_s,
                                           refresh=refresh or given is not None,
                                           on_stage=lambda name: a.stage(f"reference baselines: {name}"))
        return baseline

    async def _prebuild(self, a: _Attempt) -> dict[str, Any]:
        """Compile what the design compiles on a CPU build worker before it takes a GPU slot
        (`LocalExecutor.prebuild`), where the executor has one and the domain has something to
        build (`Domain.prebuild`): `{"prebuild": what happened}` as data, or {}. A failure costs
        only the attempt: the design's own worker builds what is not cached."""
        run = getattr(self.executor, "prebuild", None)  # an optional member of the executor
        req = a.domain.prebuild(a.task.problem, a.design, self.cfg) if run is not None and a.domain.prebuild else None
        if run is None or req is None:
            return {}
        a.stage("building on a CPU worker")
        # the compile limit (or the user's run limit, which then bounds the whole evaluation)
        limit = a.task.compile_timeout_s(a.timeout_s) or a.timeout_s or self.cfg.compile_timeout_s
        t0 = time.monotonic()
        try:
            sr = await run(owned(req, a.design.id[:10]), limit)
        except (OSError, HarnessError) as e:
            return {"prebuild": {"wall_s": round(time.monotonic() - t0, 3), "error": f"{type(e).__name__}: {e}"}}
        if sr is None:
            return {}
        out = interpret([ValidatorSpec(s.name) for s in req.stages], sr, req.request_id, limit)
        result = out.results[0] if out.results else None
        details = result.details if result is not None and isinstance(result.details, dict) else {}
        return {"prebuild": {"wall_s": round(time.monotonic() - t0, 3),
                             "outcome": result.outcome if result else "missing", "timed_out": sr.timed_out,
                             "builds": details.get("builds", []),
                             "note": details.get("note") or (result.reason if result is not None else None)}}

    async def baseline(self, problem: Problem, *, environment: Mapping[str, Any] | None = None, refresh: bool = False,
                       timeout_s: float | None = None, on_stage: Callable[[str], None] | None = None) -> Baseline:
        """Reference timings (`Baselines.measure`): from the cache when the hardware and what the
        domain's baseline rules name match; none for a domain without `baselines`."""
        return await self.baselines.measure(problem, environment=environment, refresh=refresh, timeout_s=timeout_s,
                                            on_stage=on_stage)

    async def audit(self, problem: Problem, *, timeout_s: float | None = None) -> tuple[Verdict, dict[str, Any]]:
        """Run the null-model audit of a problem; returns the verdict and the environment.

        Raises:
            HarnessError: the domain has no audit.
        """
        domain = get_domain(problem.domain)
        if "audit" not in domain.graphs:
            raise HarnessError(f"the {problem.domain} domain has no audit")
        return await self.run_reference_graph(problem, domain.graphs["audit"], domain.open(problem, self.cfg).timeout_s(timeout_s))

    async def confirm_block(self, problem: Problem, designs: Mapping[str, str], order: list[str],
                            reference_ms: float | None = None,
                            on_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
        """One block of a confirmation round: the reference, the domain's other baseline modes
        named in `order` and `designs` (id -> the design as one text) timed in one fresh worker,
        each paired with the reference, in `order`. Its details (per program: `fresh` and `warm`
        ratios, or `error`).

        Raises:
            HarnessError: the domain cannot confirm, or the worker did not finish the block.
        """
        domain = get_domain(problem.domain)
        if "confirm" not in domain.graphs:
            raise HarnessError(f"the {problem.domain} domain has no confirmation round")
        one = domain.open(problem, self.cfg).timeout_s(None, reference_ms)
        limit = one * (1 + len(order) / 2)  # each program timed twice, beside the reference
        verdict, env = await self.run_reference_graph(
            problem, domain.graphs["confirm"], limit, confirm=[{"id": k, "source": v} for k, v in designs.items()],
            confirm_order=list(order), on_stage=on_stage)
        r = verdict.result("confirm")
        if r is None or r.outcome != "passed":
            raise HarnessError(f"the confirmation block did not finish: {verdict.report()[:600]}")
        return {**dict(r.details), "environment": env}

    async def run_reference_graph(
        self, problem: Problem, specs: Any, limit: float, device: str | None = None,
        compile_limit_s: float | None = None, on_stage: Callable[[str], None] | None = None, **request: Any
    ) -> tuple[Verdict, dict[str, Any]]:
        """Run a worker-only graph that loads the reference and no candidate (on `device`,
        default: the first; `compile_limit_s` for its compile stage, default the config's;
        `on_stage` hears each stage as it starts)."""
        graph = ValidatorGraph.of(specs)
        expect = request.pop("reference_expect_ms", None)
        task = get_domain(problem.domain).open(problem, self.cfg)
        req = owned(task.build_request(None, graph.specs, **request), "baselines")
        if expect is not None:
            req = task.with_reference_expectation(req, expect)
        compile_limit = compile_limit_s if compile_limit_s is not None else self.cfg.compile_timeout_s
        ran = await submitted(self.executor, req, graph.specs, limit, compile_limit,
                              stage_events(on_stage) if on_stage else None, device or self.physical_device)
        run = GraphRun(graph, batch_placement="worker")
        run.record(ran.out.results)
        run.record_missing(graph.specs, "the worker ended before this stage ran")
        return Verdict(run.results), {**ran.out.environment, "host": ran.slot.host, "physical_device": ran.slot.physical}
