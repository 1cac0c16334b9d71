"""The run limit fits the problem (issue 22): the user's limit is a limit; the default grows
with the eager reference's time, so a big problem's honest design is not cut off."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.domains.pytorch.domain import SLOW_FACTOR, candidate_design, harness_calls, timeout_s
from stratagem.domains.pytorch.problem import load_problem

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_run_limit_grows_with_the_reference_and_a_set_one_does_not(tmp_path) -> None:
    problem = load_problem(ROOT / "examples/01_elementwise/problem.py")
    cfg = load_config(None, {}).evaluation
    calls = harness_calls(problem, cfg)
    assert 100 < calls < 1000  # every call of an evaluation, both programs
    assert timeout_s(problem, cfg) == cfg.timeout_s == timeout_s(problem, cfg, reference_ms=3.0)  # small: the floor
    slow = timeout_s(problem, cfg, reference_ms=500.0)
    assert slow == calls * 0.5 * SLOW_FACTOR > cfg.timeout_s
    assert timeout_s(problem, cfg, 60.0, reference_ms=500.0) == 60.0  # --timeout
    assert timeout_s(problem, load_config(None, {"evaluation": {"timeout_s": 45}}).evaluation,
                     reference_ms=500.0) == 45.0  # [evaluation] timeout_s, set by the user
    declared = tmp_path / "p.py"
    declared.write_text((ROOT / "examples/01_elementwise/problem.py").read_text() + '\nSTRATAGEM = {"timeout_s": 30}\n')
    assert timeout_s(load_problem(declared), cfg, reference_ms=500.0) == 30.0  # the problem's own
    more = load_config(None, {"evaluation": {"correctness_trials": 10, "timing": {"max_retimes": 4}}}).evaluation
    assert harness_calls(problem, more) > calls


def test_an_evaluation_runs_under_the_limit_its_baseline_implies(cpu_config) -> None:
    """The eager median reaches the run limit before the candidate's worker starts (here a
    search's baseline, whose eager call takes 2 s), and the evaluation says which it was."""
    import asyncio

    from stratagem.core.verdict import Verdict
    from stratagem.evaluation.executors import LocalExecutor
    from stratagem.evaluation.results import Baseline
    from stratagem.evaluation.service import Evaluator

    problem = load_problem(ROOT / "tests/fixtures/problem_linear.py")
    design = candidate_design((ROOT / "tests/fixtures/candidates/good_addmm.py").read_text())
    slow = Baseline(problem.id, {"eager": {"median_ms": 2000.0}}, {}, True, Verdict(()), "eager")
    cfg = cpu_config.model_copy(update={"correctness_trials": 2})
    cfg.model_fields_set.discard("timeout_s")  # the default, not the user's: it may grow
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(problem, design, baseline=slow))
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.sandbox["run_limit_s"] == harness_calls(problem, cfg) * 2.0 * SLOW_FACTOR


def test_a_worker_cut_at_the_provisional_limit_runs_again_under_the_fitted_one(cpu_config) -> None:
    """With no baseline to reuse, the baseline is measured beside the design's worker, which
    runs under the default limit; cut off there, it runs again under the limit the measured
    eager time implies, and the honest design is valid."""
    import asyncio

    from stratagem.evaluation.executors import LocalExecutor
    from stratagem.evaluation.service import Evaluator

    fix = ROOT / "tests/fixtures/slow"
    cfg = cpu_config.model_copy(update={"timeout_s": 3.0, "correctness_trials": 2})
    cfg.model_fields_set.discard("timeout_s")  # a default (3 s here): it may grow
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(fix / "problem.py"),
                                                        candidate_design((fix / "honest.py").read_text())))
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.baseline is not None and not ev.baseline.cached
    eager_ms = ev.baseline.median_ms("eager")
    assert eager_ms is not None and eager_ms > 60
    assert ev.sandbox["run_limit_s"] == harness_calls(load_problem(fix / "problem.py"), cfg) * eager_ms / 1e3 * SLOW_FACTOR


HANGS = {
    "in __init__": "def __init__(self):\n        super().__init__()\n        time.sleep(3600)\n\n    def forward(self, x):\n        return torch.relu(x)",
    "in the first call": "def forward(self, x):\n        time.sleep(3600)\n        return torch.relu(x)",
    "in a later call": ("def __init__(self):\n        super().__init__()\n        self.calls = 0\n\n"
                        "    def forward(self, x):\n        self.calls += 1\n        if self.calls > 2:\n"
                        "            while True:\n                pass\n        return torch.relu(x)"),
}


@pytest.mark.parametrize("where", list(HANGS))
def test_a_limit_the_user_sets_bounds_the_whole_evaluation(where, cpu_config) -> None:
    """`--timeout 8` means 8 s, whatever the candidate hangs in: its construction, its first
    call (which the harness otherwise charges to the compile limit), or a later call; the
    verdict names that limit. (A first call that slept forever ran 302 s under --timeout 60.)"""
    import asyncio
    import time

    from stratagem.evaluation.executors import LocalExecutor
    from stratagem.evaluation.service import Evaluator

    cfg = cpu_config.model_copy(update={"correctness_trials": 2})
    cfg.model_fields_set.discard("compile_timeout_s")  # the user set a run limit only
    source = f"import time\n\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    {HANGS[where]}\n"
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    t0 = time.monotonic()
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(ROOT / "tests/fixtures/problem_relu.py"),
                                                        candidate_design(source), timeout_s=8.0,
                                                        with_baseline=False))
    wall = time.monotonic() - t0
    [failure] = ev.verdict.failures
    assert failure.kind == "timeout" and "8 s limit set for the whole evaluation" in (failure.reason or "")
    assert wall < 8.0 + 10.0, wall  # the limit, plus killing the group and the parent's own steps (under load)


def test_the_compile_limit_stands_apart_only_when_no_run_limit_was_set_alone(tmp_path) -> None:
    from stratagem.domains.pytorch.domain import compile_timeout_s

    problem = load_problem(ROOT / "examples/01_elementwise/problem.py")
    default = load_config(None, {}).evaluation
    assert compile_timeout_s(problem, default) == default.compile_timeout_s  # defaults: two limits
    assert compile_timeout_s(problem, default, 60.0) is None  # --timeout alone: one limit for all
    run_only = load_config(None, {"evaluation": {"timeout_s": 90}}).evaluation
    assert compile_timeout_s(problem, run_only) is None
    both = load_config(None, {"evaluation": {"timeout_s": 90, "compile_timeout_s": 400}}).evaluation
    assert compile_timeout_s(problem, both, 60.0) == 400.0  # the user gave builds their own


def test_a_problem_s_pytorch_settings_are_validated_once_for_all_its_requests(monkeypatch) -> None:
    from stratagem.domains import get_domain
    from stratagem.domains.pytorch import settings as pytorch_settings
    from stratagem.domains.pytorch.settings import PyTorchSettings

    validated: list[object] = []
    real = PyTorchSettings.model_validate
    monkeypatch.setattr(PyTorchSettings, "model_validate", lambda raw: validated.append(raw) or real(raw))
    pytorch_settings._validated.cache_clear()
    problem = load_problem(ROOT / "examples/01_elementwise/problem.py")
    cfg = load_config(None, {"pytorch": {"correctness_trials": 4, "roofline_margin": 0.4}}).evaluation
    task = get_domain("pytorch").open(problem, cfg)
    for _ in range(3):  # the graph, the limits, the request, the agents' facts: one validation in all
        task.build_request(candidate_design(problem.source), task.validator_graph().specs)
        task.timeout_s(reference_ms=2.0), task.compile_timeout_s(), task.agent_facts()
    assert len(validated) == 1
    other = load_config(None, {"pytorch": {"correctness_trials": 5}}).evaluation
    assert pytorch_settings.settings(other).correctness_trials == 5 and len(validated) == 2  # another section: its own
