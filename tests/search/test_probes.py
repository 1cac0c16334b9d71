"""The writers' tools (`check`, `profile`) run through the harness: a wrong design's mismatch
and a right one's pass come back as text, the reference's CPU profile names torch's operators,
each run is counted in the run's spend (kept across a resume, shown by show, show --json and
the report) and refused once a budget is used up, nothing is stored as a design; a domain
without a profiler offers `check` alone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeEvaluator, src

from stratagem.cli import main
from stratagem.config import environment, load_config
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.domains import load_problem
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator
from stratagem.report.html import build_report
from stratagem.search import probes
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[2]
GELU = ROOT / "examples" / "01_elementwise"
GOOD = (GELU / "candidates" / "torch_rewrite.py").read_text()
WRONG = GOOD.replace('approximate="tanh"', 'approximate="none"')


class NoPolicy:
    name = "none"


def session(run_dir: Path, **search: Any) -> RunSession:
    cfg = load_config(None, {"evaluation": {"device": "cpu", "timeout_s": 600, "baselines": ["eager"]},
                             "search": search})
    problem = load_problem(GELU / "problem.py")
    store = RunStore.open(run_dir)
    store.add_problem(problem)
    executor = LocalExecutor.for_devices(["cpu"], cfg.evaluation, dict(environment()))
    return RunSession(cfg, problem, store, Evaluator(cfg.evaluation, executor, "cpu"), NoPolicy())  # type: ignore[arg-type]


def test_check_and_profile_run_in_the_harness_and_count_in_the_spend(tmp_path: Path) -> None:
    s = session(tmp_path)
    assert s.probes() == ("check", "profile")

    async def go() -> list[str]:
        return [await s.probe("check", WRONG, author="implementor-1"),
                await s.probe("check", GOOD, author="implementor-1"),
                await s.probe("profile", "reference", author="strategist")]

    wrong, good, profile = asyncio.run(go())
    assert "check of this code failed" in wrong and "[correctness]" in wrong
    assert "check of this code passed" in good and "Not a verdict" in good
    assert "profile of one warm call of the reference" in profile and "aten::" in profile
    # each operator beside the device's calibrated peaks (the `kernels` stage), bounded
    assert "GB/s (" in profile and "of peak)" in profile and "the device's calibrated peaks:" in profile
    assert len(profile.splitlines()) <= 12 + 5
    assert s.spend.probes == 3 and s.spend.gpu_seconds > 0 and s.spend.evaluations == 0
    assert s.store.designs(s.problem.id) == [] and s.store.evaluations() == []  # not designs
    again = session(tmp_path)  # a resumed run's spend keeps them, and its budgets limit them
    assert again.spend.probes == 3 and again.spend.gpu_seconds == pytest.approx(s.spend.gpu_seconds)
    again.budgets.cfg = again.cfg.search.model_copy(update={"max_gpu_seconds": again.spend.gpu_seconds})
    refused = asyncio.run(again.probe("check", GOOD))
    assert refused.startswith("`check` not run") and "max_gpu_seconds" in refused
    assert again.spend.probes == 3


def test_a_probe_of_the_same_code_runs_once_and_a_prefetched_one_is_shared(tmp_path: Path) -> None:
    """On a queue of batch calls to a GPU host every probe is a round trip of minutes: the
    reference's profile asked beside the baselines (`prefetch`) answers the agent that asks for
    it, the same probe asked twice (or at once by two agents) runs once, and one that did not
    run (a budget used up) runs again when asked again."""
    s = session(tmp_path)
    runs: list[str] = []
    refuse = [True]

    async def fake_graph(graph: Any, design: Any, what: str, compute_only: bool = False, **_: Any) -> Verdict | str:
        runs.append(what)
        await asyncio.sleep(0.01)
        if refuse[0]:
            return "not run: max_gpu_seconds used up"
        return Verdict((ValidatorResult("load", "passed"), ValidatorResult("kernels", "passed", details={"rows": []})))

    s._run_graph = fake_graph  # type: ignore[method-assign]

    async def go() -> list[str]:
        first = await s.probe("profile", "reference", author="strategist")
        refuse[0] = False
        s.prefetch("profile")
        return [first, *await asyncio.gather(s.probe("profile", "reference", author="strategist"),
                                             s.probe("profile", "reference", author="analyst")),
                await s.probe("check", GOOD), await s.probe("check", GOOD), await s.probe("check", WRONG)]

    refused, *answers = asyncio.run(go())
    assert refused.startswith("`profile` not run")
    assert runs == ["strategist: profile of the reference", "the run: profile of the reference",
                    "an agent: check of this code", "an agent: check of this code"]
    assert answers[0] == answers[1] and "profile of one warm call of the reference" in answers[0]
    assert answers[2] == answers[3]


def test_the_command_domain_offers_check_alone() -> None:
    problem = load_problem(ROOT / "examples" / "command" / "window_sums")
    assert probes.offered(problem) == ("check",)
    assert probes.graph_of(problem, "profile") is None
    check = probes.graph_of(problem, "check")
    assert check is not None and "timing" not in [s.name for s in check.specs]


def test_show_and_the_report_count_the_tool_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 44: show, show --json and the report rebuilt the spend from agent calls and
    # evaluations alone, so a run's check and profile runs read 0 there
    cfg = load_config(None, {})
    problem = load_problem(ROOT / "tests" / "fixtures" / "problem_relu.py")
    run_dir = tmp_path / "r"

    async def go(s: RunSession) -> None:
        await s.probe("check", "reference", author="implementor-1")
        await s.probe("profile", "reference", author="implementor-1")
        await s.evaluate(src("a", 0.5), strategy="innovate", author="implementor-1")

    with RunStore.open(run_dir) as store:
        store.add_problem(problem)
        store.start_run(problem.id, "none", cfg.model_dump(mode="json"))
        s = RunSession(cfg, problem, store, FakeEvaluator(), NoPolicy())  # type: ignore[arg-type]
        asyncio.run(go(s))
        assert s.spend.probes == 2
    assert main(["show", str(run_dir), "--json"]) == 0
    spend = json.loads(capsys.readouterr().out)["spend"]
    assert spend["probes"] == 2 and spend["evaluations"] == 1
    assert spend["gpu_seconds"] == pytest.approx(3.0)  # a second per tool run and per evaluation
    assert main(["show", str(run_dir)]) == 0
    line = " ".join(capsys.readouterr().out.split())
    assert "evaluations 1 · tool runs 2 (check, profile) · device 3.0 s" in line
    assert "1 and 2 tool runs (check, profile) (3 s of worker time)" in build_report(run_dir, analyses=False)


def test_an_audit_that_could_not_finish_judges_nothing(tmp_path: Path) -> None:
    """A red-team audit killed at its run limit (a loaded machine) says nothing of the design:
    no review calls it cheating; an audit that found a wrong output does."""
    s = session(tmp_path)
    rec = s.store.add_design(s.problem.id, candidate_design(GOOD))
    verdicts = [Verdict((ValidatorResult("breach_audit", "failed", reason="killed at the 120 s run limit", kind="timeout"),)),
                Verdict((ValidatorResult("breach_audit", "failed", reason="distributions: wrong", kind="wrong_output"),))]

    async def fake_graph(graph: Any, design: Any, what: str, compute_only: bool = False, **_: Any) -> Verdict | str:
        return verdicts.pop(0)

    s._run_graph = fake_graph  # type: ignore[method-assign]
    asyncio.run(s.audit(rec.id))
    assert s.store.reviews() == []
    asyncio.run(s.audit(rec.id))
    [review] = s.store.reviews()
    assert review.cheating and "distributions: wrong" in review.reason


def test_a_red_team_audit_gets_three_evaluations_limits_and_a_probe_the_problem_s_own(tmp_path: Path) -> None:
    # an audit repeats the trials at several distributions and times again: at one evaluation's
    # limit a real one was killed and judged nothing; probes are limited like the designs they run
    cfg = load_config(None, {"evaluation": {"device": "cpu", "baselines": ["eager"]}})
    problem = load_problem(GELU / "problem.py")
    store = RunStore.open(tmp_path)
    store.add_problem(problem)
    seen: list[Any] = []  # each run's limit

    class Recording:
        def __init__(self) -> None:
            self.cfg = cfg.evaluation

        async def evaluate(self, problem: Any, design: Any, *, graph: Any = None, timeout_s: Any = None,
                           baseline: Any = None, **kw: Any) -> Any:
            seen.append(timeout_s)
            raise OSError("recorded")

    s = RunSession(cfg, problem, store, Recording(), NoPolicy())  # type: ignore[arg-type]
    design = candidate_design(GOOD)
    store.add_design(problem.id, design)
    asyncio.run(s.audit(design.id))
    asyncio.run(s.probe("check", GOOD, author="implementor-1"))
    task_limit = 120.0  # [evaluation] timeout_s's default, no reference time known yet
    audit_limit, check_limit = seen
    assert audit_limit == 3 * task_limit + cfg.evaluation.compile_timeout_s
    assert check_limit is None  # the problem's own limit, fitted in the evaluator
