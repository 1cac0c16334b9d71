"""The `tune` policy: a template's study through the real loop (a fake evaluator for the
study's logic; the real CPU harness for one templated PyTorch candidate), constraint
violations never evaluated, invalid points fed back, resume without re-evaluating a point,
seeded reproducibility, and the CLI's `--design`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fakes import FakeEvaluator

from stratagem.cli import main
from stratagem.config import load_config
from stratagem.core.template import parse_template
from stratagem.domains.pytorch.problem import load_problem
from stratagem.search.loop import SearchLoop
from stratagem.search.policies.registry import TuneSettings, resolved_config
from stratagem.search.policies.tune import (
    STATE_INFEASIBLE,
    TAG_PARAMS,
    TAG_TEMPLATE,
    TunePolicy,
    history,
    key,
)
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests/fixtures/problem_relu.py"

# The fake evaluator reads the verdict from markers: `# runtime_ms=X` valid at X ms beside eager
# at 1 ms; `# invalid: why` a wrong output. The marks are repeated in a constant, so two points
# are two programs (the loop links designs that differ only in comments).
FAKE = """\
# stratagem: param MS = choice(0.5, 0.8, 1.25, 2.0)
# stratagem: param BLOCK = pow2(1, 16)
# stratagem: param MODE = choice("ok", "invalid: wrong sum")
# stratagem: require BLOCK >= 4
class ModelNew: pass
# runtime_ms={{MS}}
# {{MODE}}
_MARKS = "{{MS}} {{BLOCK}} {{MODE}}"
"""


def write(tmp_path: Path, text: str = FAKE) -> Path:
    path = tmp_path / "templated.py"
    path.write_text(text)
    return path


def make(tmp_path: Path, design: Path, iterations: int, seed: int = 0, run: str = "run",
         search: dict | None = None, **tune):
    cfg = load_config(None, {"search": {"policy": "tune", "iterations": iterations, "seed": seed, "confirm_top": 0,
                                        **(search or {})},
                             "policies": {"tune": {"design": str(design), **tune}}})
    cfg = resolved_config(cfg)
    assert cfg.search.patience is None  # a study spends its budget
    problem = load_problem(PROBLEM)
    settings = TuneSettings.model_validate(cfg.policies["tune"])
    policy = TunePolicy.from_settings(settings, problem, cfg.search.seed)
    store = RunStore.open(tmp_path / run)
    store.add_problem(problem)
    if store.run() is None:
        store.start_run(problem.id, "tune", cfg.model_dump(mode="json"))
    return cfg, problem, policy, store


def run(tmp_path: Path, design: Path, iterations: int, evaluator: FakeEvaluator | None = None, **kw):
    cfg, problem, policy, store = make(tmp_path, design, iterations, **kw)
    ev = evaluator or FakeEvaluator()
    try:
        out = asyncio.run(SearchLoop(RunSession(cfg, problem, store, ev, policy)).run())  # type: ignore[arg-type]
        views = SearchLoop(RunSession(cfg, problem, store, ev, policy)).session.views()  # type: ignore[arg-type]
        infeasible = store.policy_state(f"tune/{STATE_INFEASIBLE}") or []
        evaluations = [e.design_id for e in store.evaluations()]
    finally:
        store.close()
    return out, views, infeasible, evaluations, ev


def test_a_study_through_the_loop_finds_the_best_point(tmp_path: Path) -> None:
    template = parse_template({"candidate.py": FAKE})
    out, views, infeasible, evaluations, ev = run(tmp_path, write(tmp_path), iterations=14)
    assert out.stop_reason.startswith("iterations (14 of 14)")
    assert len(views) == 14 and len(set(ev.calls)) == 14 == len(evaluations)  # each point evaluated once
    points = [v.tags[TAG_PARAMS] for v in views]
    assert len({key(p) for p in points}) == 14
    assert all(v.tags[TAG_TEMPLATE] == template.id for v in views)
    assert all(v.author == "tune" and v.strategy == "tuned point" for v in views)
    for v, p in zip(views, points, strict=True):
        assert template.render(p)["candidate.py"] == v.source  # the design is the rendered point
        assert v.status == ("invalid" if p["MODE"] != "ok" else "valid")
    # the best found is the fastest setting (0.5 ms: 2x over eager) among 24 feasible points
    assert out.top is not None and out.top.tags[TAG_PARAMS]["MS"] == 0.5
    assert out.top.speedup == pytest.approx(2.0)


def test_constraint_violations_are_never_evaluated(tmp_path: Path) -> None:
    template = parse_template({"candidate.py": FAKE})
    _, views, infeasible, _, ev = run(tmp_path, write(tmp_path), iterations=10)
    assert all(not template.violations(v.tags[TAG_PARAMS]) for v in views)
    assert all(v.tags[TAG_PARAMS]["BLOCK"] >= 4 for v in views)
    # the sampler drew violating points (BLOCK 1 or 2: 40% of the space), kept apart, never rendered
    assert infeasible and all(template.violations(p) for p in infeasible)
    rendered = {template.render(v.tags[TAG_PARAMS])["candidate.py"] for v in views}
    assert len(rendered) == len(ev.calls) == 10


def test_invalid_points_are_recorded_and_fed_back_as_the_penalty(tmp_path: Path) -> None:
    template = parse_template({"candidate.py": FAKE})
    _, views, infeasible, _, _ = run(tmp_path, write(tmp_path), iterations=8, penalty=-1.0)
    invalid = [v for v in views if v.status == "invalid"]
    assert invalid and all("wrong sum" in v.report for v in invalid)
    trials = history(template, views, infeasible, penalty=-1.0)
    by_id = {t.design_id: t for t in trials if t.design_id}
    assert {by_id[v.id].value for v in invalid} == {-1.0}
    assert {by_id[v.id].status for v in invalid} == {"invalid"}
    valid = [v for v in views if v.status == "valid"]
    assert all(by_id[v.id].value == pytest.approx(v.speedup) for v in valid)
    assert [t.status for t in trials if t.design_id is None] == ["infeasible"] * (len(trials) - len(views))


def test_resume_continues_the_study_without_re_evaluating_a_point(tmp_path: Path) -> None:
    design = write(tmp_path)
    _, first, _, _, ev1 = run(tmp_path, design, iterations=4)
    design.unlink()  # the run kept the template's text: the file is not needed to resume
    _, views, _, evaluations, ev2 = run(tmp_path, design, iterations=9)
    assert len(views) == 9 and len(ev2.calls) == 5  # only the new points were evaluated
    assert not set(ev1.calls) & set(ev2.calls)
    assert len(evaluations) == len(set(evaluations)) == 9
    assert [v.id for v in views[:4]] == [v.id for v in first]
    assert len({key(v.tags[TAG_PARAMS]) for v in views}) == 9


def test_a_killed_evaluation_is_finished_on_resume_and_counted_once(tmp_path: Path) -> None:
    class Killed(FakeEvaluator):
        async def evaluate(self, problem, design, **kw):
            if len(self.calls) == 2:
                self.calls.append(design.id)
                raise KeyboardInterrupt
            return await super().evaluate(problem, design, **kw)

    design = write(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, design, iterations=6, evaluator=Killed())
    _, views, _, evaluations, ev = run(tmp_path, design, iterations=6)
    assert len(views) == 6 and len(evaluations) == len(set(evaluations)) == 6
    assert len({key(v.tags[TAG_PARAMS]) for v in views}) == 6


def test_a_study_is_a_function_of_its_seed(tmp_path: Path) -> None:
    design = write(tmp_path)

    def points(seed: int, where: str) -> list[str]:
        _, views, _, _, _ = run(tmp_path, design, iterations=8, seed=seed, run=where)
        return [key(v.tags[TAG_PARAMS]) for v in views]

    assert points(3, "a") == points(3, "b")
    assert points(3, "a") != points(4, "c")


def test_a_small_space_is_exhausted_then_the_policy_stops(tmp_path: Path) -> None:
    small = FAKE.replace("pow2(1, 16)", "pow2(2, 4)").replace("choice(0.5, 0.8, 1.25, 2.0)", "choice(0.5, 0.8)")
    out, views, _, _, ev = run(tmp_path, write(tmp_path, small), iterations=20)
    assert out.stop_reason == "the policy has nothing more to propose"
    assert len(views) == len(ev.calls) == 2 * 1 * 2  # BLOCK 4 only (>= 4), MS two, MODE two


def test_the_device_seconds_budget_stops_the_study(tmp_path: Path) -> None:
    out, views, _, _, ev = run(tmp_path, write(tmp_path), iterations=20, search={"max_gpu_seconds": 3.5})
    assert "gpu" in out.stop_reason or "device" in out.stop_reason, out.stop_reason
    assert len(views) == len(ev.calls) == 4  # 1 s each: the fourth crosses 3.5 s


def test_template_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = write(tmp_path, FAKE.replace("pow2(1, 16)", "pow2(1, 12)"))
    with pytest.raises(Exception, match=rf"{bad}:2: BLOCK: pow2\(1, 12\): LO and HI must be powers of two"):
        make(tmp_path, bad, iterations=1)


def test_cli_design_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path, FAKE.replace("require BLOCK >= 4", "require BLOK >= 4"))
    code = main(["run", str(PROBLEM), "--policy", "tune", "--design", str(bad), "--device", "cpu",
                 "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr()
    assert code == 2 and f"{bad}:4:" in err.out + err.err and "BLOK" in err.out + err.err
    assert not (tmp_path / "r").exists()  # refused before the run directory is written
    assert main(["run", str(PROBLEM), "--design", str(bad), "--device", "cpu"]) == 2
    assert "--policy tune" in "".join(capsys.readouterr())
    assert main(["run", str(PROBLEM), "--policy", "tune", "--device", "cpu", "--run-dir", str(tmp_path / "r")]) == 2
    assert "--design FILE" in "".join(capsys.readouterr())


def test_show_lists_the_points_the_best_and_the_objective_per_value(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    run(tmp_path, write(tmp_path), iterations=6)
    assert main(["show", str(tmp_path / "run"), "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["tuning"]
    assert len(t["points"]) == 6 and all(set(p["params"]) == {"MS", "BLOCK", "MODE"} for p in t["points"])
    valid = [p for p in t["points"] if p["status"] == "valid"]
    assert t["best"]["speedup"] == max(p["speedup"] for p in valid)
    assert sum(v["tried"] for v in t["by_value"]["MODE"].values()) == 6
    bad = t["by_value"]["MODE"].get("invalid: wrong sum")
    assert bad is None or bad["best_speedup"] is None  # invalid points have no speedup
    assert main(["show", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "tuning: 6 points" in out and "(best)" in out and "MS: " in out


# -- the real CPU harness ----------------------------------------------------------------------

CHUNKED = """\
import torch
import torch.nn as nn

# A chunked ReLU whose scale is a parameter: 2.0 is the reference's, 2.5 computes something else.
# stratagem: param CHUNK = pow2(8, 64)
# stratagem: param SCALE = choice("2.0", "2.5")
# stratagem: require 32 % CHUNK == 0


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        parts = [torch.relu(self.lin(c)) * {{SCALE}} for c in x.split({{CHUNK}})]
        return torch.cat(parts)
"""


@pytest.mark.slow  # about a minute: three evaluations of 12-25 s each on this machine's CPU
def test_a_templated_pytorch_candidate_on_the_cpu_harness(tmp_path: Path) -> None:
    from stratagem.evaluation.api import make_evaluator

    problem_path = ROOT / "tests/fixtures/tune/problem.py"
    template = parse_template({"candidate.py": CHUNKED})
    assert [p["CHUNK"] for p in template.points()] == [8, 8, 16, 16, 32, 32]  # 64 never
    design = write(tmp_path, CHUNKED)
    fast = {"device": "cpu", "baselines": ["eager"], "correctness_trials": 2,
            "timing": {"warmup_ms": 5, "budget_ms": 20, "min_reps": 3, "max_reps": 30}}
    cfg = resolved_config(load_config(None, {
        "evaluation": fast, "search": {"policy": "tune", "iterations": 2, "confirm_top": 0, "seed": 2},
        "policies": {"tune": {"design": str(design), "startup": 2}}}))
    problem = load_problem(problem_path)
    policy = TunePolicy.from_settings(TuneSettings.model_validate(cfg.policies["tune"]), problem, 2)
    evaluator = make_evaluator(cfg.evaluation)
    with RunStore.open(tmp_path / "run") as store:
        store.add_problem(problem)
        store.start_run(problem.id, "tune", cfg.model_dump(mode="json"))
        loop = SearchLoop(RunSession(cfg, problem, store, evaluator, policy))

        async def go():
            try:
                return await loop.run()
            finally:
                await evaluator.executor.aclose()

        asyncio.run(go())
        views = loop.session.views()
    # seed 2 draws (CHUNK 16, SCALE 2.5) then (CHUNK 32, SCALE 2.0) at random (startup 2)
    assert [v.tags[TAG_PARAMS] for v in views] == [{"CHUNK": 16, "SCALE": "2.5"}, {"CHUNK": 32, "SCALE": "2.0"}]
    for v in views:
        p = v.tags[TAG_PARAMS]
        assert p["CHUNK"] != 64
        if p["SCALE"] == "2.5":
            assert v.status == "invalid" and "correctness" in v.report, v.report
        else:
            assert v.status in ("valid", "unstable"), v.report
