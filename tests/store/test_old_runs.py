"""A run database written before the records' keys became the domain's data still reads and
shows as it did: the stored speedups keyed `eager` and `compile` (the worker's `vs_eager`
inside them), a run configuration with the PyTorch settings in `[evaluation]`, the views'
words from the PyTorch domain (`BaselineNames`), a command run in its own words."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from rich.console import Console

from stratagem.config import StratagemConfig
from stratagem.domains import names_of
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.settings import settings
from stratagem.report.html import build_report, load_run
from stratagem.report.leaderboard import leaderboard
from stratagem.report.suite import row_of, suite_json
from stratagem.search.headline import ratios_of
from stratagem.search.state import stored_views
from stratagem.store.records import EvaluationRecord
from stratagem.store.sqlite import RunStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SRC = (FIXTURES / "candidates" / "good_addmm.py").read_text(encoding="utf-8")

OLD_CONFIG = {  # as `run` stored it before [pytorch] existed
    "evaluation": {"device": "cpu", "baselines": ["eager", "compile"], "integrity": "strict",
                   "correctness_trials": 3, "tolerances": {"float32": {"atol": 1e-3, "rtol": 1e-3}}},
    "search": {"iterations": 2},
}

SPEEDUPS = {  # the stored rows' keys: the reference's under `eager`, torch.compile's under `compile`
    "eager": {"ratio": 2.0, "low": 1.9, "high": 2.1, "pairs": 40, "chained": False},
    "compile": {"ratio": 1.25, "low": 1.2, "high": 1.3, "pairs": 40, "chained": True,
                "baseline_unstable": "the compile baseline drifted"},
    "max-autotune": {"ratio": 0.9, "low": 0.85, "high": 0.95, "pairs": 40, "chained": True},
}


def _timing(ratio: float) -> dict[str, object]:
    return {"name": "timing", "outcome": "passed", "reason": None, "kind": None, "duration_s": 1.0,
            "details": {"runtime": {"median_ms": 0.5}, "reference": {"median_ms": 1.0},
                        "speedup": {"ratio": ratio, "low": ratio - 0.1, "high": ratio + 0.1}}}


def old_run(run_dir: Path) -> str:
    """A finished run written the old way; the best design's id."""
    problem = load_problem(FIXTURES / "problem_linear.py")
    with RunStore.open(run_dir) as s:
        s.add_problem(problem)
        s.start_run(problem.id, "recipes", OLD_CONFIG)
        d = s.add_design(problem.id, candidate_design(SRC, provenance={"iteration": 1, "author": "recipe",
                                                                         "strategy": "recipe"}))
        s.add_evaluation(EvaluationRecord(
            design_id=d.id, problem_id=problem.id, status="valid", device="cpu", runtime_ms=0.5, speedup=2.0,
            validators=[_timing(2.0)], environment={"torch": "2.5.0", "device": "cpu"}, seeds=[1],
            reference_ms={"eager": 1.0, "compile": 0.625, "max-autotune": 0.45}, created_at=time.time(),
            speedups=SPEEDUPS, stability={"verdict": "stable"}))
        s.set_run_status("finished", "iterations")
    return d.id


def _text(renderable: object) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_stored_keys_are_read_as_the_domain_names_them(tmp_path):
    run_dir = tmp_path / "run"
    best_id = old_run(run_dir)
    conn = sqlite3.connect(run_dir / "run.db")  # the database holds the old key names, untouched
    try:
        (stored,) = conn.execute("SELECT speedups FROM evaluations").fetchone()
    finally:
        conn.close()
    assert set(json.loads(stored)) == {"eager", "compile", "max-autotune"}
    with RunStore.read(run_dir) as store:
        (view,) = stored_views(store)
    assert view.id == best_id and view.speedup == 2.0 and (view.speedup_low, view.speedup_high) == (1.9, 2.1)
    second = ratios_of(view, names_of("pytorch")).compared  # the domain's compared baseline is `compile`
    assert second is not None
    assert (second.ratio, second.low, second.high, second.unstable) == (1.25, 1.2, 1.3, "the compile baseline drifted")
    n = names_of("pytorch")
    assert (n.reference, n.compared, n.compared_text) == ("eager", "compile", "torch.compile")


def test_an_old_run_shows_and_reports_in_the_pytorch_words(tmp_path):
    run_dir = tmp_path / "run"
    old_run(run_dir)
    data = load_run(run_dir)
    board = _text(leaderboard(data.views, {"eager": 1.0, "compile": 0.625}, names=data.names))
    assert "vs eager [95% CI]" in board and "vs compile [95% CI]" in board
    assert "2.00x" in board and "1.25x" in board and "torch.compile baseline's timing stayed unstable" in board
    page = build_report(run_dir, analyses=False)
    assert "vs eager [95% CI]" in page and "vs compile [95% CI]" in page and "chained via eager" in page
    row = row_of(run_dir)
    assert (row.speedup, row.second, row.domain) == (2.0, 1.25, "pytorch")
    out = suite_json([row])
    assert out["problems"][0]["speedup_compile"] == 1.25 and out["problems"][0]["beats_eager"] is True
    assert out["summary"]["fast_1_compile"] == 1.0 and "fast_1.5_compile" in out["labels"]


def test_an_old_run_configuration_resumes_with_its_pytorch_settings(tmp_path):
    run_dir = tmp_path / "run"
    old_run(run_dir)
    with RunStore.read(run_dir) as store:
        run = store.run()
    assert run is not None and run.config == OLD_CONFIG  # stored as it was written
    cfg = StratagemConfig.model_validate(run.config)  # as `resume` reads it
    pt = settings(cfg.evaluation)
    assert (pt.baselines, pt.integrity, pt.correctness_trials) == (["eager", "compile"], "strict", 3)
    assert pt.tolerances["float32"].atol == 1e-3 and cfg.search.iterations == 2


def test_a_domain_without_a_compared_baseline_gets_its_own_words():
    n = names_of("command")
    assert n.reference == "the reference" and n.compared is None


def test_views_of_a_domain_without_a_compared_baseline_have_no_such_column():
    from stratagem.core.search import DesignView

    v = DesignView(id="a" * 64, source="", status="valid", speedup=2.0, speedup_low=1.9, speedup_high=2.1,
                   runtime_ms=0.5, iteration=1)
    board = _text(leaderboard([v], {}, names=names_of("command")))
    assert "vs the reference [95% CI]" in board and "2.00x" in board
    assert "compile" not in board and "eager" not in board and "vs - " not in board
