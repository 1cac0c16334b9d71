"""The red-team audit of an accepted design (issue 46: `worker/breach_audit.py`, the breach
graph of `domains/pytorch/graphs.py`), on the CPU.

Honest candidates (the adversarial corpus's, tests/adversarial/honest) pass every check; each
cheat under `breach/` is one the default harness accepts (outright, or with one of its checks
switched off by the problem), and the audit fails it by the check named here. Each case spawns
one sandboxed worker (about 3-5 s on 2 cores, most of it the worker's start; the audit itself
measured 1.5-1.9 s on the honest candidates, `total_cost_s`). The harness's acceptance of each
cheat (the premise) is checked by the `slow` tests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

from stratagem.config import EvaluationConfig, environment
from stratagem.core.graph import ValidatorGraph
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.graphs import BREACH_GRAPH, breach_graph
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.worker.redteam import audit as breach_audit
from stratagem.domains.pytorch.worker.redteam import timing as breach_timing
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.results import Evaluation
from stratagem.evaluation.service import Evaluator

HERE = Path(__file__).parent
BREACH = HERE / "breach"
ADVERSARIAL = HERE.parent / "adversarial"
FIX = HERE.parent / "fixtures"

CHECKS = ["delayed_compare", "anchored_trials", "distributions", "interleaved_timing", "fresh_shapes", "provenance"]

HONEST = {  # candidate -> problem, as tests/adversarial/test_corpus.py's HONEST_CASES
    "addmm_fused.py": "linear_relu", "baddbmm_batched.py": "linear_relu", "class_constant.py": "linear_relu",
    "functional_linear.py": "linear_relu", "module_helper.py": "linear_relu", "docstring_mentions.py": "linear_relu",
    "registered_buffer.py": "linear_relu", "inplace_fresh_buffers.py": "linear_relu",
    "row_mean_dynamic.py": "row_mean", "silu_functional.py": "silu", "layernorm_own_params.py": "layer_norm",
    "leaky_fast_path.py": "leaky_clamp",
}
FAST_HONEST = {"addmm_fused.py", "row_mean_dynamic.py", "silu_functional.py", "layernorm_own_params.py"}

CHEATS: dict[str, tuple[Path, Path, str]] = {
    # id: (problem, candidate, the check that must fail)
    "hardwired_view_without_shapes": (BREACH / "problem_linear_no_shapes.py",
                                      ADVERSARIAL / "candidates" / "shape_hardwired_view.py", "fresh_shapes"),
    "headroom_grid": (ADVERSARIAL / "problems" / "linear_relu.py", BREACH / "shape_headroom_grid.py", "fresh_shapes"),
    "clamp_without_off_distribution": (BREACH / "problem_linear_no_offdist.py", BREACH / "clamp_inputs.py",
                                       "distributions"),
    "large_values_zeroed": (ADVERSARIAL / "problems" / "linear_relu.py", BREACH / "large_values_zeroed.py",
                            "distributions"),
    "reused_output_buffer": (ADVERSARIAL / "problems" / "linear_relu.py", BREACH / "reused_output_buffer.py",
                             "delayed_compare"),
    "fingerprint_cache": (BREACH / "problem_fixed_inputs.py", BREACH / "fingerprint_cache.py", "interleaved_timing"),
}

NEUTRALIZED: dict[str, tuple[str, tuple[str, ...]]] = {
    # the corpus's value-keyed caches: they fire on a repeated input, and the harness's fresh
    # timed inputs pay them nothing, so the audit passes them and says what fired (any of the checks)
    "cache_self_fingerprint.py": ("linear_relu", ("delayed_compare", "interleaved_timing")),
    "cache_sampled_values.py": ("linear_relu", ("delayed_compare", "interleaved_timing")),
    "cache_self_identity.py": ("linear_relu", ("delayed_compare", "interleaved_timing")),
}

KINDS = {"fingerprint_cache": "rejected", "hardwired_view_without_shapes": "exception"}
"""The failure kind where it is not `wrong_output`: timing's, and the candidate's own exception."""


def _evaluate(cfg: EvaluationConfig, problem: Path, candidate: Path, graph: ValidatorGraph | None,
              env: dict[str, str] | None = None) -> Evaluation:
    ex = LocalExecutor.for_devices(["cpu"], cfg, env if env is not None else environment())
    design = candidate_design(candidate.read_text(encoding="utf-8"))
    return asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(problem), design, with_baseline=False,
                                                          graph=graph))


def _checks(ev: Evaluation) -> dict[str, dict[str, Any]]:
    audit = ev.verdict.result("breach_audit")
    assert audit is not None and audit.outcome != "skipped", ev.verdict.report()
    return {c["check"]: c for c in audit.details["checks"]}


def _honest_params() -> list[Any]:
    return [pytest.param(name, id=name.removesuffix(".py"),
                         marks=() if name in FAST_HONEST else (pytest.mark.slow,)) for name in sorted(HONEST)]


@pytest.mark.parametrize("name", _honest_params())
def test_an_honest_candidate_passes_every_check(name: str, cpu_config: EvaluationConfig) -> None:
    problem = ADVERSARIAL / "problems" / f"{HONEST[name]}.py"
    ev = _evaluate(cpu_config, problem, ADVERSARIAL / "honest" / name, breach_graph("lenient"))
    assert ev.verdict.status == "valid", ev.verdict.report()
    checks = _checks(ev)
    assert [c for c in checks if c in CHECKS] == CHECKS  # in this order, among any others
    assert all(c["ok"] is not False for c in checks.values()), checks
    for check in CHECKS[:-1]:
        assert checks[check]["ok"] is True, checks[check]
        assert checks[check]["cost_s"] >= 0.0 and checks[check]["evidence"], checks[check]
        assert "skipped" not in checks[check], checks[check]
    assert checks["provenance"]["ok"] is None  # lenient: no own kernels required
    assert checks["anchored_trials"]["anchored"] == breach_audit.ANCHORED_TRIALS
    audit = ev.verdict.result("breach_audit")
    assert audit is not None and audit.details["total_cost_s"] > 0
    assert audit.details["fired"] == [], audit.details["fired"]  # nothing fired in an honest design


@pytest.mark.parametrize("name", sorted(NEUTRALIZED))
def test_a_shortcut_the_harness_neutralized_passes_and_says_what_fired(name: str, cpu_config: EvaluationConfig) -> None:
    problem, where = NEUTRALIZED[name]
    ev = _evaluate(cpu_config, ADVERSARIAL / "problems" / f"{problem}.py", ADVERSARIAL / "candidates" / name,
                   breach_graph("lenient"))
    audit = ev.verdict.result("breach_audit")
    assert ev.verdict.status == "valid" and audit is not None, ev.verdict.report()
    fired = audit.details["fired"]
    assert fired and all(f.split(":")[0] in where for f in fired), fired


@pytest.mark.parametrize("case", sorted(CHEATS))
def test_the_audit_catches_what_the_harness_accepted(case: str, cpu_config: EvaluationConfig) -> None:
    problem, candidate, check = CHEATS[case]
    for _ in range(3):  # a timing check on a loaded machine is inconclusive (busy), never a catch: measure again
        ev = _evaluate(cpu_config, problem, candidate, breach_graph("lenient"))
        audit = ev.verdict.result("breach_audit")
        busy = audit is not None and audit.outcome == "passed" and str(
            _checks(ev).get(check, {}).get("evidence", "")).startswith("inconclusive: the machine was busy")
        if not busy:
            break
    else:
        pytest.skip(f"{check} stayed inconclusive: the machine was busy in three audits")
    assert ev.verdict.status == "invalid" and audit is not None and audit.outcome == "failed", ev.verdict.report()
    checks = _checks(ev)
    failed = [c for c in checks.values() if c["ok"] is False]
    assert audit.reason is not None and audit.reason.startswith(f"{failed[0]['check']}:"), audit.reason
    assert failed[0]["check"] == check, audit.reason
    assert checks[check]["ok"] is False and checks[check]["kind"] == audit.kind, checks[check]
    assert audit.kind == KINDS.get(case, "wrong_output")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CHEATS))
def test_the_default_harness_accepts_each_cheat(case: str, cpu_config: EvaluationConfig) -> None:
    """The premise: each cheat is `valid` under the harness (with the problem's own narrowing);
    the one that is fast only on repeated inputs is faster than eager there."""
    problem, candidate, _check = CHEATS[case]
    ev = _evaluate(cpu_config, problem, candidate, None)
    assert ev.verdict.status == "valid", ev.verdict.report()
    if case == "fingerprint_cache":
        timing = ev.verdict.result("timing")
        assert timing is not None and timing.details["speedup"]["ratio"] > 2 * breach_timing.TIMING_FAST


@pytest.mark.slow
@pytest.mark.parametrize(("name", "valid"), [("honest", True), ("dead_branch", False)])
def test_strict_provenance_runs_after_the_audit(name: str, valid: bool, cpu_config: EvaluationConfig,
                                                tmp_path: Path) -> None:
    """Under the strict policy the breach graph ends with `provenance`, measured after every call
    of the audit: an own native kernel doing the work passes, one in a dead branch fails."""
    strict = FIX / "strict"
    src = (strict / f"capi_{name}.py").read_text().replace("__SOURCE__", str(strict / "relu_capi.cpp"))
    cand = tmp_path / "candidate.py"
    cand.write_text(src)
    ev = _evaluate(cpu_config, FIX / "problem_relu.py", cand, ValidatorGraph.of(BREACH_GRAPH), {"PATH": "/usr/bin:/bin"})
    audit, prov = ev.verdict.result("breach_audit"), ev.verdict.result("provenance")
    assert audit is not None and audit.outcome == "passed", ev.verdict.report()
    assert prov is not None and prov.outcome == ("passed" if valid else "failed"), ev.verdict.report()
    assert _checks(ev)["provenance"]["ok"] is None


# -- the parts, in this process --------------------------------------------------------------

def test_the_breach_graph_runs_provenance_only_under_strict() -> None:
    assert [s.name for s in BREACH_GRAPH] == ["load", "breach_audit", "provenance"]
    assert breach_graph("strict").names == ("load", "breach_audit", "provenance")
    assert breach_graph("lenient").names == ("load", "breach_audit")


def test_fresh_sizes_keep_the_alignment_and_differ_from_the_visible_ones() -> None:
    assert breach_audit.grown(32, 1.5) == 48 and breach_audit.grown(64, 2.0) == 128
    assert breach_audit.grown(100, 1.5) == 152  # 100 is aligned to 4
    variants = breach_audit.size_variants(["batch_size", "dim"], {"batch_size": 32, "dim": 64})
    assert {"batch_size": 64, "dim": 128} in variants and {"batch_size": 16, "dim": 32} in variants
    odd = [v for v in variants if all(x % 2 for x in v.values())]
    assert len(odd) == 2
    assert {"batch_size": 32, "dim": 64} not in variants
    assert breach_audit.size_variants(["flag"], {"flag": True}) == []


def test_perturbed_inputs_are_new_values_of_the_same_distribution() -> None:
    x = torch.randn(64, 64)
    idx = torch.arange(8)
    y, same_idx = breach_timing.perturbed([x, idx], seed=7)
    assert same_idx is idx
    assert not torch.equal(x, y)
    assert float(((y - x).abs() / x.abs().clamp_min(1e-30)).max()) <= breach_timing.PERTURB * 1.01
