"""The float64 anchor and the calibrated correctness rule, on the CPU: a long summation whose
float32 error is known, an honest reordering that must pass and a sloppier sum that must
fail, the fallback where float64 is impossible, and a failing baseline flagged everywhere."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
import torch
from fakes_path import FakeEvaluator, ScriptedPolicy, make_loop, src  # noqa: F401

from stratagem.cli import main
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.settings import with_settings
from stratagem.domains.pytorch.worker import compare
from stratagem.domains.pytorch.worker.anchor import Anchor
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

ANCHOR = Path(__file__).resolve().parents[1] / "fixtures" / "anchor"
RULE = {"mode": "calibrated", "factor": 4.0, "atol_floor": 0.0, "ulp_floor": 2.0}


class _Sum(torch.nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


def test_the_anchor_of_a_long_sum_is_near_exact_and_eager_is_not() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 2**16) + 1.0
    anchor = Anchor(_Sum(), "cpu")([x])
    assert anchor is not None and anchor.dtype == torch.float64
    exact = torch.tensor([math.fsum(row.tolist()) for row in x], dtype=torch.float64)
    eager = x.sum(dim=1)
    anchor_err = (anchor - exact).abs().max().item()
    eager_err = (eager.double() - exact).abs().max().item()
    assert eager_err > 1e-4  # float32 accumulation over 65536 terms of magnitude ~1
    assert anchor_err < eager_err / 1000  # the anchor is the better estimate by far
    assert x.dtype == torch.float32  # the caller's inputs are left alone


def _synthetic(k: float) -> compare.Comparison:
    torch.manual_seed(1)
    a = torch.randn(1000, dtype=torch.float64) * 100
    e = torch.randn(1000, dtype=torch.float64) * 1e-3  # eager's own error pattern
    eager = (a + e).float()
    cand = (a + k * e.roll(7)).float()  # an error of the same kind, k times larger
    return compare.calibrated_compare(a, eager, cand, RULE)


def test_calibrated_rule_accepts_errors_like_eagers_and_rejects_ten_times_worse() -> None:
    assert _synthetic(1.0).ok
    assert _synthetic(2.5).ok
    bad = _synthetic(10.0)
    assert not bad.ok and "eager's own" in (bad.reason or "")
    assert bad.anchor and bad.anchor[0]["candidate"] > bad.anchor[0]["limit"]


def test_calibrated_rule_still_checks_structure_and_nan_positions() -> None:
    a = torch.ones(8, dtype=torch.float64)
    assert not compare.calibrated_compare(a, torch.ones(8), torch.ones(9), RULE).ok
    nan = torch.ones(8)
    nan[3] = float("nan")
    assert not compare.calibrated_compare(a, torch.ones(8), nan, RULE).ok
    assert not compare.calibrated_compare(a, torch.ones(8), torch.ones(8, dtype=torch.float64), RULE).ok


def test_the_anchor_says_why_when_float64_is_impossible() -> None:
    class Casts(torch.nn.Module):
        def forward(self, x):
            return x.float() * 2

    anchor = Anchor(Casts(), "cpu")
    assert anchor([torch.ones(3)]) is None
    assert "float32" in (anchor.unavailable or "")


def _evaluate(cfg, candidate: str, problem: str = "problem.py"):
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    design = candidate_design((ANCHOR / candidate).read_text())
    return asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(ANCHOR / problem), design,
                                                         with_baseline=False))


@pytest.fixture
def calibrated(cpu_config):
    return with_settings(cpu_config, correctness={"mode": "calibrated"}, correctness_trials=2)


def test_end_to_end_calibrated_mode_passes_a_reordering_and_fails_a_sloppy_sum(calibrated) -> None:
    good = _evaluate(calibrated, "reordered.py")
    c = good.verdict.result("correctness")
    assert good.verdict.status == "valid", good.verdict.report()
    assert c is not None and c.details["mode"] == "calibrated"
    for t in c.details["trials"]:  # each trial reports both errors against the anchor
        [a] = t["anchor"]
        assert 0 < a["reference"] and a["candidate"] <= a["limit"]
    bad = _evaluate(calibrated, "sloppy.py")
    f = bad.verdict.failures[0]
    assert (f.name, f.kind) == ("correctness", "wrong_output") and "float64 reference" in (f.reason or "")


def test_fixed_mode_anchors_only_where_it_is_cheap_or_a_trial_fails(cpu_config, monkeypatch) -> None:
    """The fixed rule decides without the anchor: it reports the first trial's errors against
    float64 while that is cheap, anchors a failing trial to say how far each is, and says in
    the verdict which trials were anchored."""
    cfg = with_settings(cpu_config, correctness={"mode": "fixed"}, correctness_trials=3)
    ev = _evaluate(cfg, "reordered.py")
    c = ev.verdict.result("correctness")
    assert c is not None and c.details["mode"] == "fixed"
    first, *rest = c.details["trials"]
    assert first["anchor"][0]["reference"] > 0 and not any("anchor" in t for t in rest)
    assert c.details["anchored"]["trials"] == [first["seed"]] and "first trial" in c.details["anchored"]["rule"]
    bad = _evaluate(cfg, "sloppy.py", "exact_problem.py")
    f = bad.verdict.result("correctness")
    assert f is not None and f.outcome == "failed"
    [failed] = f.details["trials"]
    assert failed["anchor"][0]["candidate"] > failed["anchor"][0]["reference"]
    assert f.details["anchored"]["trials"] == [failed["seed"]]


def test_a_failing_compile_baseline_is_flagged_in_eval_json(capsys, tmp_path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[evaluation]\ndevice = "cpu"\n[pytorch]\nbaselines = ["eager", "compile"]\ncorrectness_trials = 2\n'
                   "[pytorch.timing]\nwarmup_ms = 5\nbudget_ms = 20\nmin_reps = 3\nmax_reps = 50\n")
    code = main(["eval", str(ANCHOR / "exact_problem.py"), str(ANCHOR / "exact_same.py"), "--config", str(cfg), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "valid", out["failures"]
    why = out["baseline"]["fails_correctness"]["compile"]
    assert "outside atol=0" in why
    assert out["speedups"]["compile"]["baseline_fails"] == why  # beside the ratio itself
    assert "fails_correctness" not in json.dumps(out["speedups"]["eager"])


def test_a_failing_compile_baseline_is_flagged_in_show_and_the_context(tmp_path, capsys) -> None:
    from stratagem.context.render import render_design

    ev = FakeEvaluator(compared_fails="trial seed 1: output: 59 of 64 elements outside atol=0")
    loop, store, _ = make_loop(tmp_path, ScriptedPolicy([[src("a", 0.5)]]), ev, iterations=1)
    asyncio.run(loop.run())
    assert main(["show", str(store.run_dir)]) == 0
    text = capsys.readouterr().out
    # the leaderboard marks the ratio (`*`; here the confirmed one, `c`, which the run is ranked
    # by) and says why under it
    assert "1.60x c * [1.60, 1.60]" in text and "* the torch.compile baseline fails the correctness check" in text
    assert main(["show", str(store.run_dir), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["compile_fails"].startswith("trial seed 1")
    view = loop.session.views()[0]
    assert "fails the correctness check" in render_design(view, domain="pytorch")


# -- the reference rule (the default): precision that follows the reference's own -----------

def test_reference_rule_passes_a_design_closer_to_float64_than_a_reduced_precision_reference(cpu_config) -> None:
    """Issue 42: the reference rounds its matmul's operands (as TF32 does on a GPU); an exact
    float32 design differs from it by ~1e-3 and fails the fixed check, but is closer to the
    float64 result than the reference: the reference rule passes it and says why."""
    cfg = with_settings(cpu_config, correctness_trials=2)
    ev = _evaluate(cfg, "reduced_exact.py", "reduced_problem.py")
    assert ev.verdict.status == "valid", ev.verdict.report()
    c = ev.verdict.result("correctness")
    assert c is not None and c.details["mode"] == "reference"
    assert c.details["decided_by"].startswith("reference: 2 of 2 trials"), c.details["decided_by"]
    for t in c.details["trials"]:
        [a] = t["anchor"]
        assert t["decided_by"] == "reference" and a["candidate"] < a["reference"] / 10
        assert t["benchmarks"]["kernelbench"] is False and set(t["benchmarks"]) == {"kernelbench", "pike"}
    assert c.details["benchmarks"]["kernelbench"]["ok"] is False  # what KernelBench's rule would say
    assert "float32" in c.details["reference_precision"]["summary"]
    fixed = _evaluate(with_settings(cpu_config, correctness={"mode": "fixed"}, correctness_trials=2),
                      "reduced_exact.py", "reduced_problem.py")
    assert fixed.verdict.status == "invalid"  # KernelBench's rule alone rejects it


def test_reference_rule_rejects_a_design_below_the_references_precision_as_a_downgrade(cpu_config) -> None:
    """Issue 57: float8 operands where the reference rounds to bfloat16: a precision
    downgrade, said as such, whatever its error."""
    ev = _evaluate(with_settings(cpu_config, correctness_trials=2), "reduced_coarser.py", "reduced_problem.py")
    f = ev.verdict.result("correctness")
    assert f is not None and f.outcome == "failed" and f.kind == "wrong_output", ev.verdict.report()
    assert "precision downgrade: other operators computed in float8 where the reference computed in bfloat16" in (
        f.reason or ""), f.reason
    assert f.details["trials"][0]["decided_by"] == "precision"
    assert f.details["precision_evidence"]["downgrade"] and f.details["design_precision"]["lowest"]["other"] == "float8"


def test_reference_rule_admits_another_rounding_at_the_references_precision(cpu_config) -> None:
    """Issue 57: the weight rounded to bfloat16 by truncation, the reference's precision
    rounded another way (1.4-2.1x its error against float64): seen at that precision, valid,
    and the details say which evidence decided."""
    ev = _evaluate(with_settings(cpu_config, correctness_trials=3), "reduced_truncated.py", "reduced_problem.py")
    c = ev.verdict.result("correctness")
    assert ev.verdict.status == "valid" and c is not None, ev.verdict.report()
    assert c.details["precision_evidence"]["seen"] is True, c.details["precision_evidence"]
    assert "the design computed at the reference's precision or higher" in c.details["decided_by"]
    assert all(t["decided_by"] == "reference" for t in c.details["trials"])


def test_reference_rule_on_an_exact_reference_is_the_fixed_rule(cpu_config) -> None:
    """Where the reference is exact float32, the second look admits nothing the fixed check
    rejects by more than float32's rounding: the bfloat16-accumulated sum still fails."""
    ev = _evaluate(with_settings(cpu_config, correctness_trials=2), "sloppy.py")
    f = ev.verdict.result("correctness")
    assert f is not None and f.outcome == "failed", ev.verdict.report()
    good = _evaluate(with_settings(cpu_config, correctness_trials=2), "reordered.py")
    c = good.verdict.result("correctness")
    assert good.verdict.status == "valid" and c is not None
    assert c.details["decided_by"].startswith("fixed: every trial"), c.details["decided_by"]


def test_reference_rule_unit() -> None:
    torch.manual_seed(3)
    a = torch.randn(4096, dtype=torch.float64)
    eager = (a + torch.randn(4096, dtype=torch.float64) * 1e-3).float()  # a reference 1e-3 off
    exact = a.float()
    tol = {"float32": {"atol": 1e-4, "rtol": 1e-4}}
    rule = {"mode": "reference", "factor": 2.0, "atol_floor": 0.0, "ulp_floor": 2.0}
    fixed = compare.compare_outputs(eager, exact, tol)
    assert not fixed.ok
    ok = compare.reference_compare(a, eager, exact, rule, tol, fixed)
    assert ok.ok and ok.decided_by == "reference" and ok.anchor and ok.anchor[0]["outside"] == 0
    worse = (a + torch.randn(4096, dtype=torch.float64) * 5e-3).float()
    bad = compare.reference_compare(a, eager, worse, rule, tol, compare.compare_outputs(eager, worse, tol))
    assert not bad.ok and bad.anchor and bad.anchor[0]["outside"] > 0
    assert compare.benchmark_verdicts(eager, exact, None) == {"kernelbench": False, "pike": True}
    assert compare.benchmark_verdicts(eager, eager, tol) == {"kernelbench": True, "pike": True}
