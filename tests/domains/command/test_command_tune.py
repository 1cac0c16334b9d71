"""`--policy tune` on a command problem (issue 27, items 1-2): the templated C example
(examples/command/blocked_scan, a blocked prefix sum whose cost per element is 8192 / (BLOCK x
GROUP) + BLOCK + 4 x GROUP steps, least at BLOCK = 32 with GROUP = 8) tuned through the loop on
the real sandboxed CPU harness. Every point renders to the problem's editable file; the study
finds the optimum or a neighbour, never evaluates a constraint violation, feeds an invalid point
(a 32-bit accumulator: a wrong output) back as invalid, and resumes without evaluating a point
twice. Each evaluation takes one to three seconds here."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from stratagem.cli import main
from stratagem.config import EvaluationConfig, environment, load_config
from stratagem.core.search import MEASURED
from stratagem.core.template import parse_template
from stratagem.domains import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator
from stratagem.search import state as st
from stratagem.search.loop import SearchLoop
from stratagem.search.policies.registry import TuneSettings, policy_name, resolved_config
from stratagem.search.policies.tune import (
    STATE_INFEASIBLE,
    TAG_PARAMS,
    TunePolicy,
    history,
    key,
    read_template_files,
    reference_template,
)
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "command" / "blocked_scan"
TEMPLATE = EXAMPLE / "designs" / "template"

# The example's template with GROUP fixed at 8 (a space of 13 x 2 points, 20 feasible), so a
# budget of 8 evaluations is enough: per element 1024 / BLOCK + BLOCK + 32 steps, least at 32.
SMALL = (TEMPLATE / "scan.c").read_text().replace("pow2(1, 64)", "choice(8)").replace(
    "require BLOCK * GROUP <= 16384", "require BLOCK * GROUP <= 4096")
FAST_TIMING = """
[timing]
pairs = 4
runs = 2
warmup = 0
"""


@pytest.fixture
def problem_dir(tmp_path: Path) -> Path:
    """The example with smaller inputs and fewer timed pairs (an evaluation in about a second)."""
    root = tmp_path / "blocked_scan"
    shutil.copytree(EXAMPLE, root)
    toml = (root / "problem.toml").read_text().replace("n = [12000, 16000]", "n = [6000, 8000]")
    (root / "problem.toml").write_text(toml.split("[timing]")[0] + FAST_TIMING)
    return root


def study(problem_dir: Path, design: Path, cpu_config: EvaluationConfig, run_dir: Path, iterations: int,
          seed: int = 1):
    """Run (or resume) a tune study on the real CPU harness; its views, infeasible points and
    the design ids the evaluator judged."""
    cfg = resolved_config(load_config(None, {
        "search": {"policy": "tune", "iterations": iterations, "seed": seed, "confirm_top": 0},
        "policies": {"tune": {"design": str(design), "startup": 3}}}))
    cfg = cfg.model_copy(update={"evaluation": cpu_config})
    problem = load_problem(problem_dir)
    policy = TunePolicy.from_settings(TuneSettings.model_validate(cfg.policies["tune"]), problem, seed)
    ev = Evaluator(cpu_config, LocalExecutor.for_devices(["cpu"], cpu_config, environment()), "cpu")
    with RunStore.open(run_dir) as store:
        store.add_problem(problem)
        if store.run() is None:
            store.start_run(problem.id, "tune", cfg.model_dump(mode="json"))
        loop = SearchLoop(RunSession(cfg, problem, store, ev, policy))
        out = asyncio.run(loop.run())
        views = loop.session.views()
        infeasible = store.policy_state(f"tune/{STATE_INFEASIBLE}") or []
        judged = [e.design_id for e in store.evaluations()]
    return out, views, infeasible, judged


def test_a_template_directory_renders_to_the_editable_files() -> None:
    files = read_template_files(TEMPLATE, "scan.c")
    assert list(files) == ["scan.c"]
    t = parse_template(files)
    assert t.names == ("BLOCK", "GROUP", "ACC") and t.size == 13 * 7 * 2
    assert len(list(t.points())) == 162  # BLOCK x GROUP over 16384 (the scratch buffer) excluded
    scan = t.render({"BLOCK": 32, "GROUP": 8, "ACC": "unsigned long long"})["scan.c"]
    assert "#define BLOCK 32\n" in scan and "typedef unsigned long long acc_t;" in scan and "{{" not in scan
    # a single file is the problem's main file
    assert read_template_files(TEMPLATE / "scan.c", "scan.c") == files


def test_tune_finds_the_known_optimum_and_resumes(problem_dir: Path, cpu_config: EvaluationConfig,
                                                  tmp_path: Path) -> None:
    design = tmp_path / "template"
    design.mkdir()
    (design / "scan.c").write_text(SMALL)
    template = parse_template({"scan.c": SMALL})
    run_dir = tmp_path / "run"
    _, first, _, judged_first = study(problem_dir, design, cpu_config, run_dir, iterations=4)
    assert len(first) == 4 == len(set(judged_first))
    _, views, infeasible, judged = study(problem_dir, design, cpu_config, run_dir, iterations=8)
    # resumed: the first four points kept, four new ones, none proposed twice (the loop's own
    # re-timings of a new best are further evaluations of one design, not new points)
    assert [v.id for v in views[:4]] == [v.id for v in first]
    assert len(views) == 8 and set(judged) == {v.id for v in views}
    points = [v.tags[TAG_PARAMS] for v in views]
    assert len({key(p) for p in points}) == 8
    # every design is the rendered point, in the problem's editable file
    for v, p in zip(views, points, strict=True):
        assert v.source == template.render(p)["scan.c"]
    # constraint violations (BLOCK over 512) were drawn, kept apart and never evaluated
    assert all(not template.violations(p) for p in points)
    assert infeasible and all(template.violations(p) for p in infeasible)
    # a 32-bit accumulator overflows: invalid (correctness), told to the study as the penalty
    for v, p in zip(views, points, strict=True):
        if p["ACC"] == "unsigned int":
            assert v.status == "invalid" and "correctness" in v.report, v.report
        else:
            assert v.status in ("valid", "unstable"), v.report
    trials = history(template, views, infeasible, penalty=0.0)
    assert all(t.value == 0.0 for t in trials if t.status in ("invalid", "infeasible"))
    # the best found (the study's objective: the paired speedup; with 4 pairs the stability
    # verdict says "too few to judge", so the points are unstable, not ranked) is BLOCK = 32 or a neighbour
    measured = [v for v in views if v.status in MEASURED and v.speedup is not None]
    best = max(measured, key=lambda v: v.speedup or 0.0).tags[TAG_PARAMS]
    assert best["ACC"] == "unsigned long long" and best["BLOCK"] in (16, 32, 64), best
    # the report shows the study: every point, and the objective against each parameter
    from stratagem.report.html import build_report

    page = build_report(run_dir, analyses=False)
    section = page[page.index('<h2 id="tuning">'):]
    assert section.count("<tr>") == 9 and "objective against each parameter" in section  # a header and 8 points
    assert all(f"<th>{n}</th>" in section for n in ("BLOCK", "GROUP", "ACC"))


def test_the_cli_tunes_a_design_directory(problem_dir: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(problem_dir), "--policy", "tune", "--design", str(TEMPLATE), "--iterations", "1",
                 "--device", "cpu", "--run-dir", str(tmp_path / "r")])
    out = "".join(capsys.readouterr())
    assert code == 0, out
    with RunStore.read(tmp_path / "r") as store:
        (d,) = store.designs()
        (v,) = st.stored_views(store)
    assert set(d.files) == {"scan.c"} and set(v.tags[TAG_PARAMS]) == {"BLOCK", "GROUP", "ACC"}


def test_without_a_model_a_reference_template_is_the_default(problem_dir: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(None, {})
    problem = load_problem(problem_dir)
    with pytest.raises(Exception, match=r"--policy tune --design DIR"):
        policy_name(cfg, problem)  # a plain reference: say what to do
    assert main(["run", str(problem_dir), "--device", "cpu"]) == 2
    assert "--policy tune --design DIR" in "".join(capsys.readouterr())
    # a reference that declares parameters is the template tune uses by default
    (problem_dir / "reference" / "scan.c").write_text(SMALL)
    problem = load_problem(problem_dir)
    assert policy_name(cfg, problem) == "tune"
    own = reference_template(problem)
    assert own is not None and own.names == ("BLOCK", "GROUP", "ACC")
    policy = TunePolicy.from_settings(TuneSettings(), problem, 0)
    assert policy.template is not None and policy.template.id == own.id
