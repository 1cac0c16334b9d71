"""Owns evaluating one design against one problem: the validator graph, end to end.

Parent-placed validators run inline; worker-placed ones go to the executor as one batch (one
fresh sandboxed process). The speedup over the reference is the paired ratio the timing stage
measured in the design's own worker (reference and design in alternating blocks), with its
interval. The speedups over the domain's other baseline modes chain it with the reference/mode
ratio that the baseline worker (which never loads a design) measured paired as well:
design/mode = (reference/design) / (reference/mode). Baselines are cached per problem,
hardware and what the domain's `BaselineRules` say they hold for; a search measures them
afresh once per invocation. See docs/timing.md.

Baselines and device peaks are kept per machine and device where a worker measured them (the
slot's host and physical device), never under the parent's host name: before a request runs
they are looked up for the executor's host when it knows it (local), else for any host (queue,
Ray: there only to fit the run limit), and a baseline found or measured for a design is checked
against the slot its worker reports; one of another machine or device, or an unstable cached
one, is replaced by that slot's own (looked up by its key, else measured).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stratagem.config import EvaluationConfig, cache_dir
from stratagem.core.design import Design
from stratagem.core.graph import GraphRun, ValidatorGraph, ValidatorSpec
from stratagem.core.jsonish import mapping
from stratagem.core.paired import Stability
from stratagem.core.problem import Problem
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.domains import get_domain
from stratagem.errors import HarnessError
from stratagem.evaluation.baselines import BaselineCache, baseline_key, slot_key
from stratagem.evaluation.executors import Executor
from stratagem.evaluation.outcome import interpret
from stratagem.evaluation.progress import owned, stage_events
from stratagem.evaluation.results import REFERENCE_MODE, Baseline, Evaluation
from stratagem.worker_api.protocol import EvalRequest

__all__ = ["ANY_HOST", "REFERENCE_MODE", "Baseline", "Evaluation", "Evaluator"]
"""`Baseline`, `Evaluation` and `REFERENCE_MODE` live in `evaluation/results.py`; importing them
from here keeps working."""

ANY_HOST = "*"
"""The host of the baseline pointer an executor whose workers are elsewhere reads before a
request runs (whichever machine measured last); the worker's answer then decides."""

class Evaluator:
    """Runs designs through the harness on an executor."""

    def __init__(self, cfg: EvaluationConfig, executor: Executor, physical_device: str | None = None) -> None:
        self.cfg = cfg
        self.executor = executor
        self.physical_device = physical_device or executor.devices()[0]
        """The first device: what `baseline`, `audit` and `calibrate` run on when not told."""
        self.cache = BaselineCache(cache_dir(cfg) / "baselines")
        self._peaks: dict[str, dict[str, Any]] = {}
        """Calibrated peaks per `host/device` (as loaded or measured by this evaluator)."""
        self._fresh: dict[tuple[str, str, str], Baseline] = {}
        """Baselines this evaluator measured afresh, per (problem id, host, physical device):
        a search's baseline is measured once per invocation for the slot it was measured on,
        and once for every other slot a design of the search runs on (never shared between
        machines or devices)."""
        self.facts = BaselineCache(cache_dir(cfg) / "reference_facts")
        """What a worker measured of the reference alone (the domain says what), per problem:
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
        """Run the validator graph on `design` (the domain's, or `graph`: a writer's tool, say,
        from `Domain.probe_graphs`); for a valid, timed design, attach the reference
        baselines: `baseline` when given (a search's, measured once per invocation; its reference
        median is also the expectation of the reference-drift check) and measured on the slot
        the design ran on, else that slot's own (measured afresh once per invocation for a
        search; from the cache unless `refresh_baseline` otherwise). `on_stage` hears the name of each stage as it starts (the
        worker's, the parent's, and `calibrating` while the device's peaks are measured)."""
        stage = on_stage or (lambda _name: None)
        t0 = time.monotonic()
        given = baseline
        """The caller's baseline (a search's). It, or one found or measured here, is kept only
        if it is the own of the slot the design's worker reports."""
        domain = get_domain(problem.domain)
        run = GraphRun(_graph(problem, self.cfg, graph), batch_placement="worker")
        environment: dict[str, Any] = {}
        seeds: tuple[int, ...] = ()
        sandbox: dict[str, Any] = {}
        limit: float | None = None
        """Known before the first worker: it fits the reference's time when a baseline is
        known (the search's, or the cache's). Otherwise the baseline is measured beside the
        design's worker (`pending`), which runs under the default limit; a worker cut off at
        it runs again under the limit the baseline implies, if that is larger (a slow
        reference's first evaluation pays twice; every other one waits for nothing)."""
        pending: asyncio.Task[Baseline] | None = None
        ran_on = self.physical_device
        """The physical device of the slot the worker ran in (the parent-side steps after it,
        the roofline above all, use that device's identity)."""
        ran_host = self.executor.host()
        """The machine of that slot (None before a remote worker answered)."""
        environment.update(await self._prebuild(problem, design, timeout_s, stage))  # {"prebuild": ...} or {}
        while (step := run.next_step()) is not None:
            if step.kind == "inline":
                spec = step.specs[0]
                stage(spec.name)
                s0 = time.monotonic()
                earlier = {r.name: r for r in run.results}
                if domain.needs_peaks(spec.name):
                    if not self._peaks_known(ran_on, ran_host):
                        stage("calibrating the device's peaks (once per machine)")
                    r = await self._with_peaks(spec.name, problem, design, earlier, ran_on, ran_host)
                else:
                    r = domain.run_parent_validator(spec.name, problem, design, self.cfg, earlier, None, ran_on)
                run.record([_with_duration(r, time.monotonic() - s0)])
                continue
            if limit is None:
                baseline, pending, limit = self._run_limit(problem, baseline, with_baseline and baseline is None,
                                                           refresh_baseline, timeout_s)
            req = owned(domain.build_request(problem, design, step.specs, self.cfg), design.id[:10])
            if baseline is not None and not baseline.cached and baseline.median_ms(REFERENCE_MODE):
                req = domain.with_reference_expectation(req, baseline.median_ms(REFERENCE_MODE))
            facts = self.facts.get(f"{domain.name}-{problem.id}")
            if facts is not None:
                req = domain.with_reference_facts(req, facts["facts"])
            seeds = domain.request_seeds(req)
            on_event = stage_events(stage)

            compile_limit = domain.compile_timeout_s(problem, self.cfg, timeout_s)
            slot, sr = await self.executor.submit(req, limit, compile_limit, on_event)
            if pending is not None and sr.timed_out and sr.limit_hit == "run":
                # cut at the provisional limit: the baseline now says what fits the problem
                baseline, pending = await pending, None
                again = await self._again_if_slow(problem, design, step.specs, baseline, limit, timeout_s, on_event)
                if again is not None:
                    req, limit, slot, sr = again
                    seeds = domain.request_seeds(req)
            ran_on, ran_host = slot.physical, slot.host
            out = interpret(step.specs, sr, req.request_id, limit, compile_limit, req.compile_stage)
            results = out.results
            if facts is not None:
                results = domain.apply_reference_facts(results, facts["facts"])
            elif (found := domain.reference_facts(results)) is not None:
                self.facts.put(f"{domain.name}-{problem.id}", {"problem": problem.name, "facts": found})
            run.record(results)
            run.record_missing(step.specs, "the worker ended before this stage ran")
            environment.update(out.environment)
            environment.update(host=slot.host, physical_device=slot.physical)
            sandbox = {
                "returncode": sr.returncode, "signal": sr.signal_name, "timed_out": sr.timed_out,
                "duration_s": sr.duration_s, "network_isolated": sr.network_isolated,
                "strays_killed": sr.strays_killed, "run_limit_s": limit,
                "lock_wait_s": round((sr.phase_s or {}).get("wait", 0.0), 3),
            }
        if pending is not None:
            baseline = await _said_while_waiting(pending, stage)
        if baseline is not None and not _own(baseline, environment):
            # another machine's or device's (the search's own included: a run on a cluster or
            # on several GPUs), or unstable: this slot's own is looked up (or measured) below
            baseline = self._fresh.get((problem.id, *_slot_of(environment))) if given is not None else None
        verdict = Verdict(run.results)
        if baseline is None and with_baseline and verdict.status == "valid" and domain.measure(verdict) is not None:
            # a search's baseline is measured afresh once per invocation: on every slot it meets
            baseline = await self.baseline(problem, environment=environment, timeout_s=timeout_s,
                                           refresh=refresh_baseline or given is not None,
                                           on_stage=lambda name: stage(f"reference baselines: {name}"))
        return Evaluation(
            problem=problem, design=design, verdict=verdict, device=ran_on,
            environment=environment, seeds=seeds, baseline=baseline, sandbox=sandbox,
            wall_s=time.monotonic() - t0,
        )

    async def _prebuild(self, problem: Problem, design: Design, timeout_s: float | None,
                        stage: Callable[[str], None]) -> dict[str, Any]:
        """Compile what `design` compiles on a CPU build worker before it takes a GPU slot
        (`LocalExecutor.prebuild`), where the executor has one and the domain has something to
        build (`Domain.prebuild_request`): `{"prebuild": what happened}` as data, or {}. A
        failure costs only the attempt: the design's own worker builds what is not cached."""
        run = getattr(self.executor, "prebuild", None)
        domain = get_domain(problem.domain)
        req = domain.prebuild_request(problem, design, self.cfg) if run is not None else None
        if run is None or req is None:
            return {}
        stage("building on a CPU worker")
        # the compile limit (or the user's run limit, which then bounds the whole evaluation)
        limit = domain.compile_timeout_s(problem, self.cfg, timeout_s) or timeout_s or self.cfg.compile_timeout_s
        t0 = time.monotonic()
        try:
            sr = await run(owned(req, design.id[:10]), limit)
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

    async def baseline(
        self,
        problem: Problem,
        *,
        environment: Mapping[str, Any] | None = None,
        refresh: bool = False,
        timeout_s: float | None = None,
        on_stage: Callable[[str], None] | None = None,
    ) -> Baseline:
        """Reference timings, from the cache when the hardware and what the domain's baseline
        rules name match (`on_stage` hears each stage of a measurement as it starts)."""
        domain = get_domain(problem.domain)
        modes = domain.baselines(self.cfg, self.on_gpu)
        rules = domain.baseline_rules(problem, self.cfg) if modes else None
        if rules is None:  # the domain measures its reference beside each design only
            return Baseline(problem.id, {}, {}, False, Verdict(()))
        earlier = self._cached_entry(problem, environment)
        if earlier is not None and not refresh and not _unstable_modes(earlier):
            return Baseline(problem.id, earlier["modes"], earlier["environment"], True, Verdict(()))
        # An unstable cached baseline is measured again: every chained speedup would carry its noise.
        limit = max(domain.timeout_s(problem, self.cfg, timeout_s), rules.min_limit_s)
        expect = ((earlier or {}).get("modes") or {}).get(REFERENCE_MODE, {}).get("median_ms")
        verdict, measured_env = await self._run_reference_graph(
            problem, domain.baseline_graph, limit, device=self._baseline_device(environment),
            compile_limit_s=max(self.cfg.compile_timeout_s, limit),
            baselines=modes,
            seeds=[domain.new_seed() for _ in range(rules.check_trials)],
            reference_expect_ms=float(expect) if isinstance(expect, int | float) else None,
            on_stage=on_stage,
        )
        result = verdict.result("baseline")
        if result is None or result.outcome != "passed":
            return Baseline(problem.id, {}, measured_env, False, verdict)
        found = result.details.get("baselines")
        if not isinstance(found, Mapping):
            raise HarnessError("baseline stage passed without timings")
        modes_out = {str(k): dict(v) for k, v in found.items()}
        key = baseline_key(rules, problem.id, measured_env, modes)
        self.cache.put(key, {"problem": problem.name, "modes": modes_out, "environment": measured_env})
        fresh = Baseline(problem.id, modes_out, measured_env, False, verdict)
        self._fresh[(problem.id, *_slot_of(measured_env))] = fresh
        where = str(measured_env.get("host") or ""), str(measured_env.get("physical_device") or "")
        self.cache.put(slot_key(rules, problem.id, *where, modes), {"points_to": key})
        if self.executor.host() is None:  # where the next request runs is not known before it does
            self.cache.put(slot_key(rules, problem.id, ANY_HOST, self.physical_device, modes), {"points_to": key})
        return fresh

    def _run_limit(self, problem: Problem, baseline: Baseline | None, wanted: bool, refresh: bool,
                   timeout_s: float | None) -> tuple[Baseline | None, asyncio.Task[Baseline] | None, float]:
        """The baseline known now (the given one, or the cache's when `wanted`), the task
        measuring it beside the worker when it must be measured, and the run limit."""
        pending = None
        if wanted:
            baseline = None if refresh else self.cached_baseline(problem) or self._provisional_baseline(problem)
            if baseline is None:  # measured beside the design's worker, not before it
                pending = asyncio.create_task(self.baseline(problem, timeout_s=timeout_s, refresh=True))
        ms = baseline.median_ms(REFERENCE_MODE) if baseline is not None else None
        return baseline, pending, get_domain(problem.domain).timeout_s(problem, self.cfg, timeout_s, ms)

    async def _again_if_slow(self, problem: Problem, design: Design, specs: Any, baseline: Baseline, limit: float,
                             timeout_s: float | None, on_event: Callable[[dict[str, Any]], None],
                             ) -> tuple[EvalRequest, float, Any, Any] | None:
        """A worker cut at the provisional run limit, submitted again under the limit its
        baseline implies when that is larger: (request, limit, slot, result), or None."""
        domain = get_domain(problem.domain)
        fitted = domain.timeout_s(problem, self.cfg, timeout_s, baseline.median_ms(REFERENCE_MODE))
        if fitted <= limit:
            return None
        req = owned(domain.build_request(problem, design, specs, self.cfg), design.id[:10])
        if baseline.median_ms(REFERENCE_MODE):
            req = domain.with_reference_expectation(req, baseline.median_ms(REFERENCE_MODE))
        on_event({"event": "start", "stage": f"again under a {fitted:.0f} s run limit (the reference is slow)"})
        slot, sr = await self.executor.submit(req, fitted, self.cfg.compile_timeout_s, on_event)
        return req, fitted, slot, sr

    def _baseline_device(self, environment: Mapping[str, Any] | None) -> str:
        """The physical device a baseline is measured on: the one the design's worker ran on
        (`environment`) when this executor's slots are all on one known machine, else the first."""
        dev = str((environment or {}).get("physical_device") or "")
        if dev and self.executor.host() is not None and dev in self.executor.devices():
            return dev
        return self.physical_device

    def _cached_entry(self, problem: Problem, environment: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The cached baseline of `problem` here: the one measured in `environment` (a worker's:
        its host and physical device are part of the key), else the latest measured on the
        executor's host and first device (on any host when the workers are elsewhere), if it
        holds for the software installed here (the domain's rules decide)."""
        domain = get_domain(problem.domain)
        modes = domain.baselines(self.cfg, self.on_gpu)
        rules = domain.baseline_rules(problem, self.cfg) if modes else None
        if rules is None:
            return None
        if environment:
            return self.cache.get(baseline_key(rules, problem.id, environment, modes))
        host = self.executor.host() or ANY_HOST
        earlier = self.cache.latest(slot_key(rules, problem.id, host, self.physical_device, modes))
        if earlier is not None and not rules.holds(mapping(earlier.get("environment"))):
            return None
        return earlier

    def cached_baseline(self, problem: Problem) -> Baseline | None:
        """The baseline the cache holds for `problem` here, when it can be used as it is (None:
        it must be measured)."""
        if not get_domain(problem.domain).baselines(self.cfg, self.on_gpu):
            return None
        earlier = self._cached_entry(problem)
        if earlier is None or _unstable_modes(earlier):
            return None
        return Baseline(problem.id, earlier["modes"], earlier["environment"], True, Verdict(()))

    def _provisional_baseline(self, problem: Problem) -> Baseline | None:
        """For an executor whose workers are elsewhere: the latest baseline measured on any
        machine, even an unstable one, to fit the run limit only. Where the design's worker ran
        is not known yet, so another machine's instability says nothing of that one's cached
        baseline: once the worker reports, its slot's own replaces this one (looked up by its
        key, measured only when it is missing or unstable)."""
        if self.executor.host() is not None:
            return None
        earlier = self._cached_entry(problem)
        if earlier is None:
            return None
        return Baseline(problem.id, earlier["modes"], earlier["environment"], True, Verdict(()))

    async def _with_peaks(self, name: str, problem: Problem, design: Design, earlier: Mapping[str, ValidatorResult],
                          device: str, host: str | None) -> ValidatorResult:
        """A parent validator that reads the device's peaks (PyTorch: the roofline), with a
        guard on the calibration: the reference is honest by definition, so a floor it beats
        proves the peaks too low (a calibration on a loaded machine, say). They are measured
        again once; if the reference still beats the new floor, the check is skipped with a
        note rather than rejecting honest designs."""
        domain = get_domain(problem.domain)
        peaks = await self.device_peaks(problem, device=device, host=host)
        r = domain.run_parent_validator(name, problem, design, self.cfg, earlier, peaks, device)
        beaten = domain.reference_beats_floor(earlier, r)
        if beaten is None:
            return r
        peaks = await self.device_peaks(problem, refresh=True, device=device, host=host)
        r = domain.run_parent_validator(name, problem, design, self.cfg, earlier, peaks, device)
        again = domain.reference_beats_floor(earlier, r)
        if again is None:
            return ValidatorResult(r.name, r.outcome, r.reason, r.kind,
                                   {**r.details, "recalibrated": f"the earlier peaks were wrong: {beaten}"})
        raised = domain.demonstrated_peaks(earlier, r, peaks) if peaks is not None else None
        if raised is not None:  # kept: later evaluations start from them and calibrate no more
            r = domain.run_parent_validator(name, problem, design, self.cfg, earlier, raised, device)
            where = host or self.executor.host()
            if domain.reference_beats_floor(earlier, r) is None and where is not None:
                self._save_peaks(where, device, raised)
                return ValidatorResult(r.name, r.outcome, r.reason, r.kind, {
                    **r.details, "recalibrated": f"the calibrated peaks were too low ({again}): raised to what "
                    "the reference was measured doing"})
        return ValidatorResult(name, "passed", details={
            **r.details, "checked": False,
            "note": f"not checked: the device calibration is unreliable here ({again}); run `stratagem calibrate`"})

    def peaks_path(self, device: str | None = None, host: str | None = None) -> Path:
        """Where the calibrated peaks of `device` (default: the first) on machine `host`
        (default: the executor's) are kept.

        Raises:
            HarnessError: no host given, and the executor's workers are elsewhere.
        """
        dev = device or self.physical_device
        where = host or self.executor.host()
        if where is None:
            raise HarnessError("the peaks of a remote worker's device are kept under its host: name the host")
        return cache_dir(self.cfg) / "peaks" / f"{where}-{dev.replace(':', '')}.json"

    def _peaks_known(self, device: str, host: str | None) -> bool:
        """Whether the peaks of `device` on `host` are loaded or cached (no calibration waits)."""
        if host is None:
            return False
        return f"{host}/{device}" in self._peaks or self.peaks_path(device, host).exists()

    async def device_peaks(self, problem: Problem, *, refresh: bool = False,
                           device: str | None = None, host: str | None = None) -> dict[str, Any] | None:
        """Calibrated bandwidth and matmul rates of `device` (default: the first) on machine
        `host` (default: the executor's), measured there (cached on disk per host and device;
        `refresh` measures again and replaces the file). Peaks a worker of another machine
        measured (a remote executor chose it) are kept for that machine and None is returned:
        one machine's peaks never stand in for another's."""
        dev = device or self.physical_device
        where = host or self.executor.host()
        if where is not None and not refresh:
            if (known := self._peaks.get(f"{where}/{dev}")) is not None:
                return known
            try:
                cached = json.loads(self.peaks_path(dev, where).read_text(encoding="utf-8"))
                if isinstance(cached, dict) and cached.get("version") == get_domain(problem.domain).peaks_version:
                    self._peaks[f"{where}/{dev}"] = cached
                    return cached
            except (OSError, json.JSONDecodeError):
                pass  # missing, unreadable or of an older format: measured again
        verdict, env = await self._run_reference_graph(problem, get_domain(problem.domain).calibrate_graph, 600.0,
                                                       device=dev)
        r = verdict.result("calibrate")
        if r is None or r.outcome != "passed":
            return None
        peaks = {**dict(r.details), "environment": env}
        measured = str(env.get("host") or where or ""), str(env.get("physical_device") or dev)
        if measured[0]:
            self._save_peaks(*measured, peaks)
        if where is not None and measured != (where, dev):
            return None
        return peaks

    def _save_peaks(self, host: str, device: str, peaks: dict[str, Any]) -> None:
        self._peaks[f"{host}/{device}"] = peaks
        path = self.peaks_path(device, host)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(peaks, indent=1), encoding="utf-8")
        os.replace(tmp, path)

    async def audit(self, problem: Problem, *, timeout_s: float | None = None) -> tuple[Verdict, dict[str, Any]]:
        """Run the null-model audit of a problem; returns the verdict and the environment."""
        domain = get_domain(problem.domain)
        limit = domain.timeout_s(problem, self.cfg, timeout_s)
        return await self._run_reference_graph(problem, domain.audit_graph, limit)

    async def confirm_block(self, problem: Problem, designs: Mapping[str, str], order: list[str],
                            reference_ms: float | None = None,
                            on_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
        """One block of a confirmation round: the reference, the domain's other baseline modes
        named in `order` and `designs` (id -> the design as one text) timed in one fresh worker,
        each paired with the reference, in `order`. Its details (per program: `fresh` and `warm` ratios, or `error`).

        Raises:
            HarnessError: the domain cannot confirm, or the worker did not finish the block.
        """
        domain = get_domain(problem.domain)
        graph = getattr(domain, "confirm_graph", ())
        if not graph:
            raise HarnessError(f"the {problem.domain} domain has no confirmation round")
        one = domain.timeout_s(problem, self.cfg, None, reference_ms)
        limit = one * (1 + len(order) / 2)  # each program timed twice, beside the reference
        verdict, env = await self._run_reference_graph(
            problem, graph, limit, confirm=[{"id": k, "source": v} for k, v in designs.items()],
            confirm_order=list(order), on_stage=on_stage)
        r = verdict.result("confirm")
        if r is None or r.outcome != "passed":
            raise HarnessError(f"the confirmation block did not finish: {verdict.report()[:600]}")
        return {**dict(r.details), "environment": env}

    async def _run_reference_graph(
        self, problem: Problem, specs: Any, limit: float, device: str | None = None,
        compile_limit_s: float | None = None, on_stage: Callable[[str], None] | None = None, **request: Any
    ) -> tuple[Verdict, dict[str, Any]]:
        """Run a worker-only graph that loads the reference and no candidate (on `device`,
        default: the first; `compile_limit_s` for its compile stage, default the config's;
        `on_stage` hears each stage as it starts)."""
        graph = ValidatorGraph.of(specs)
        expect = request.pop("reference_expect_ms", None)
        domain = get_domain(problem.domain)
        req = owned(domain.build_request(problem, None, graph.specs, self.cfg, **request), "baselines")
        if expect is not None:
            req = domain.with_reference_expectation(req, expect)
        compile_limit = compile_limit_s if compile_limit_s is not None else self.cfg.compile_timeout_s
        slot, sr = await self.executor.submit(req, limit, compile_limit, stage_events(on_stage) if on_stage else None,
                                              device=device or self.physical_device)
        out = interpret(graph.specs, sr, req.request_id, limit, compile_limit, req.compile_stage)
        run = GraphRun(graph, batch_placement="worker")
        run.record(out.results)
        run.record_missing(graph.specs, "the worker ended before this stage ran")
        return Verdict(run.results), {**out.environment, "host": slot.host, "physical_device": slot.physical}


def _graph(problem: Problem, cfg: EvaluationConfig, given: ValidatorGraph | None) -> ValidatorGraph:
    """`given`, or the problem's domain's validator graph."""
    return given if given is not None else get_domain(problem.domain).validator_graph(problem, cfg)


async def _said_while_waiting(pending: asyncio.Task[Baseline], stage: Callable[[str], None]) -> Baseline:
    """The baselines measured beside a design, said as the stage it waits in when they are late."""
    if not pending.done():
        stage("waiting for the reference baselines (timed beside the design)")
    return await pending


def _with_duration(r: ValidatorResult, seconds: float) -> ValidatorResult:
    return ValidatorResult(r.name, r.outcome, r.reason, r.kind, r.details, seconds)


def _own(baseline: Baseline, environment: Mapping[str, Any]) -> bool:
    """Whether `baseline` (found or measured for a design) can be attached to a design that
    ran in `environment`: measured on its machine and physical device, and, if it came from
    the cache, stable (an unstable cached one is measured again)."""
    return _measured_in(baseline.environment, environment) and not (baseline.cached and baseline.unstable())


def _slot_of(environment: Mapping[str, Any]) -> tuple[str, str]:
    """(host, physical device) of a worker's environment ('' for what it does not name)."""
    return str(environment.get("host") or ""), str(environment.get("physical_device") or "")


def _measured_in(measured: Mapping[str, Any], environment: Mapping[str, Any]) -> bool:
    """Whether a baseline measured in `measured` (an environment) was measured on the machine
    and physical device of `environment` (a worker's; one that names neither matches any)."""
    if not environment.get("host") and not environment.get("physical_device"):
        return True
    return all(measured.get(k) == environment.get(k) for k in ("host", "physical_device"))


def _unstable_modes(cached: Mapping[str, Any]) -> list[str]:
    """The modes of a cached baseline whose timing was judged unstable."""
    modes = mapping(cached.get("modes"))
    return [m for m, v in modes.items() if not Stability.from_json((v or {}).get("stability")).stable]

