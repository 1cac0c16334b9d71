"""Owns a domain's reference baselines (`Domain.baselines`): their lookup, their measurement
by a worker that loads no design, and their cache per problem, hardware and what else the
domain's `BaselineRules` (`domains/base.py`) say they hold for.

Baselines are kept per machine and device where a worker measured them (the slot's host and
physical device), never under the parent's host name: before a request runs they are looked up
for the executor's host when it knows it (local), else for any host (queue, Ray: there only to
fit the run limit); a search measures them afresh once per invocation and slot (`fresh`).

Key: the rules' version, the problem's content hash, where it was measured (the worker's host
and physical device, never the parent's), the worker environment's part the rules name, the
modes and the rules' settings: two machines, or two GPUs of one, never share a baseline. One JSON file per key under `<cache_dir>/baselines/`
(`BaselineCache` also keeps the reference facts, under `<cache_dir>/reference_facts/`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stratagem.config import EvaluationConfig, cache_dir
from stratagem.core.jsonish import mapping
from stratagem.core.paired import Stability
from stratagem.core.problem import Problem
from stratagem.core.verdict import Verdict
from stratagem.domains import get_domain
from stratagem.domains.base import BaselineRules
from stratagem.domains.base import Baselines as DomainBaselines
from stratagem.errors import HarnessError
from stratagem.evaluation.executors import Executor
from stratagem.evaluation.results import Baseline

ANY_HOST = "*"
"""The host of the baseline pointer an executor whose workers are elsewhere reads before a
request runs (whichever machine measured last); the worker's answer then decides."""


def baseline_key(rules: BaselineRules, problem_id: str, environment: Mapping[str, Any], modes: Sequence[str]) -> str:
    """The key of a baseline measured in `environment` (a worker's, with the `host` and
    `physical_device` of the slot it ran in)."""
    parts = {
        "protocol": rules.version,
        "problem": problem_id,
        "host": environment.get("host"),
        "physical_device": environment.get("physical_device"),
        **rules.identity(environment),
        "modes": sorted(modes),
        "timing": dict(sorted(rules.settings.items())),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def slot_key(rules: BaselineRules, problem_id: str, host: str, device: str, modes: Sequence[str]) -> str:
    """What the parent knows before any worker ran (not the worker's environment): the key
    of the pointer to the latest baseline measured for this problem on machine `host` and
    physical `device` (`host` `*`: on any machine, for executors whose workers are elsewhere)."""
    parts = {"protocol": rules.version, "problem": problem_id, "host": host, "device": device,
             "modes": sorted(modes), "timing": dict(sorted(rules.settings.items()))}
    return "latest-" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


class BaselineCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def latest(self, slot: str) -> dict[str, Any] | None:
        """The entry the pointer `slot` names (the last one measured there), or None."""
        ptr = self.get(slot)
        key = (ptr or {}).get("points_to")
        return self.get(str(key)) if isinstance(key, str) else None

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) and data.get("key") == key else None

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self._path(key).with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, **record}, indent=1), encoding="utf-8")
        os.replace(tmp, self._path(key))


class Baselines:
    """The baselines an evaluator looks up, measures and keeps (`Evaluator.baselines`)."""

    def __init__(self, cfg: EvaluationConfig, executor: Executor, physical_device: str,
                 run_graph: Callable[..., Awaitable[tuple[Verdict, dict[str, Any]]]]) -> None:
        self.cfg, self.executor, self.physical_device, self.run_graph = cfg, executor, physical_device, run_graph
        self.cache = BaselineCache(cache_dir(cfg) / "baselines")
        self.fresh: dict[tuple[str, str, str], Baseline] = {}
        """Baselines measured afresh, per (problem id, host, physical device): a search's
        baseline is measured once per invocation for the slot it was measured on, and once for
        every other slot a design of the search runs on (never shared between machines or
        devices)."""

    def _rules(self, problem: Problem) -> tuple[DomainBaselines, list[str], BaselineRules] | None:
        """The domain's baselines, the modes a run measures and what they hold for; None: the
        domain has no baselines."""
        b = get_domain(problem.domain).baselines
        return (b, b.modes(self.cfg, self.physical_device.startswith("cuda")), b.rules(problem, self.cfg)) if b else None

    async def measure(self, problem: Problem, *, environment: Mapping[str, Any] | None = None, refresh: bool = False,
                      timeout_s: float | None = None, on_stage: Callable[[str], None] | None = None) -> Baseline:
        """Reference timings, from the cache when the hardware and what the domain's baseline
        rules name match (`on_stage` hears each stage of a measurement as it starts)."""
        ruled = self._rules(problem)
        if ruled is None:  # the domain times its reference beside each design only
            return _baseline(problem, {}, {}, False)
        b, modes, rules = ruled
        earlier = self.entry(problem, environment, ruled)
        if earlier is not None and not refresh and not unstable_modes(earlier):
            return _baseline(problem, earlier["modes"], earlier["environment"], True)
        # An unstable cached baseline is measured again: every chained speedup would carry its noise.
        limit = max(get_domain(problem.domain).open(problem, self.cfg).timeout_s(timeout_s), rules.min_limit_s)
        expect = _baseline(problem, earlier.get("modes") or {}, {}, True).reference_ms if earlier else None
        verdict, measured_env = await self.run_graph(
            problem, b.graph, limit, device=self.device_for(environment),
            compile_limit_s=max(self.cfg.compile_timeout_s, limit), baselines=modes,
            seeds=[b.new_seed() for _ in range(rules.check_trials)],
            reference_expect_ms=expect, on_stage=on_stage)
        result = verdict.result("baseline")
        if result is None or result.outcome != "passed":
            return _baseline(problem, {}, measured_env, False, verdict)
        found = result.details.get("baselines")
        if not isinstance(found, Mapping):
            raise HarnessError("baseline stage passed without timings")
        return self._keep(problem, rules, modes, {str(k): dict(v) for k, v in found.items()}, measured_env, verdict)

    def _keep(self, problem: Problem, rules: BaselineRules, modes: list[str], found: dict[str, Any],
              measured_env: dict[str, Any], verdict: Verdict) -> Baseline:
        """A measured baseline, cached under its key and pointed to from its slot's."""
        key = baseline_key(rules, problem.id, measured_env, modes)
        self.cache.put(key, {"problem": problem.name, "modes": found, "environment": measured_env})
        fresh = _baseline(problem, found, measured_env, False, verdict)
        where = str(measured_env.get("host") or ""), str(measured_env.get("physical_device") or "")
        self.fresh[(problem.id, *where)] = fresh
        self.cache.put(slot_key(rules, problem.id, *where, modes), {"points_to": key})
        if self.executor.host() is None:  # where the next request runs is not known before it does
            self.cache.put(slot_key(rules, problem.id, ANY_HOST, self.physical_device, modes), {"points_to": key})
        return fresh

    def device_for(self, environment: Mapping[str, Any] | None) -> str:
        """The physical device a baseline is measured on: the one the design's worker ran on
        (`environment`) when this executor's slots are all on one known machine, else the first."""
        dev = str((environment or {}).get("physical_device") or "")
        if dev and self.executor.host() is not None and dev in self.executor.devices():
            return dev
        return self.physical_device

    def entry(self, problem: Problem, environment: Mapping[str, Any] | None = None,
              ruled: tuple[DomainBaselines, list[str], BaselineRules] | None = None) -> dict[str, Any] | None:
        """The cached baseline of `problem` here: the one measured in `environment` (a worker's:
        its host and physical device are part of the key), else the latest measured on the
        executor's host and first device (on any host when the workers are elsewhere), if it
        holds for the software installed here (the domain's rules decide; `ruled`: the modes
        and rules when the caller has them)."""
        ruled = ruled or self._rules(problem)
        if ruled is None:
            return None
        _, modes, rules = ruled
        if environment:
            return self.cache.get(baseline_key(rules, problem.id, environment, modes))
        host = self.executor.host() or ANY_HOST
        earlier = self.cache.latest(slot_key(rules, problem.id, host, self.physical_device, modes))
        if earlier is not None and not rules.holds(mapping(earlier.get("environment"))):
            return None
        return earlier

    def cached(self, problem: Problem) -> Baseline | None:
        """The baseline the cache holds for `problem` here, when it can be used as it is (None:
        it must be measured)."""
        earlier = self.entry(problem)
        if earlier is None or unstable_modes(earlier):
            return None
        return _baseline(problem, earlier["modes"], earlier["environment"], True)

    def provisional(self, problem: Problem) -> Baseline | None:
        """For an executor whose workers are elsewhere: the latest baseline measured on any
        machine, even an unstable one, to fit the run limit only. Where the design's worker ran
        is not known yet, so another machine's instability says nothing of that one's cached
        baseline: once the worker reports, its slot's own replaces this one (looked up by its
        key, measured only when it is missing or unstable)."""
        earlier = self.entry(problem) if self.executor.host() is None else None
        return None if earlier is None else _baseline(problem, earlier["modes"], earlier["environment"], True)


def _baseline(problem: Problem, modes: Mapping[str, Any], environment: Mapping[str, Any], cached: bool,
              verdict: Verdict | None = None) -> Baseline:
    return Baseline(problem.id, modes, environment, cached, verdict or Verdict(()),
                    get_domain(problem.domain).names.key)


def own(baseline: Baseline, environment: Mapping[str, Any]) -> bool:
    """Whether `baseline` (found or measured for a design) can be attached to a design that
    ran in `environment`: measured on its machine and physical device (a worker's environment
    that names neither matches any), and, if it came from the cache, stable (an unstable cached
    one is measured again)."""
    if environment.get("host") or environment.get("physical_device"):
        if any(baseline.environment.get(k) != environment.get(k) for k in ("host", "physical_device")):
            return False
    return not (baseline.cached and baseline.unstable())


def slot_of(environment: Mapping[str, Any]) -> tuple[str, str]:
    """(host, physical device) of a worker's environment ('' for what it does not name)."""
    return str(environment.get("host") or ""), str(environment.get("physical_device") or "")


def unstable_modes(cached: Mapping[str, Any]) -> list[str]:
    """The modes of a cached baseline whose timing was judged unstable."""
    modes = mapping(cached.get("modes"))
    return [m for m, v in modes.items() if not Stability.from_json((v or {}).get("stability")).stable]
