"""Issue 24, item 1: every rule the harness enforces is in the prompt of every role that plans
or writes code, generated from the tables the checks run from (a rule without prompt text fails
here), for the policy, correctness rule and validators in force."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

import pytest

from stratagem.config import EvaluationConfig
from stratagem.context import pike, render
from stratagem.core.search import DesignView, Feedback, Plan, SearchState
from stratagem.domains import get_domain
from stratagem.domains.pytorch import domain as pt
from stratagem.domains.pytorch import rules as pr
from stratagem.domains.pytorch.problem import parse_problem
from stratagem.domains.pytorch.static import checks as static

ROOT = Path(__file__).resolve().parents[2]
PROVENANCE = ROOT / "src/stratagem/domains/pytorch/worker/provenance.py"

SOURCE = '''import torch
import torch.nn as nn

batch_size = 64
dim = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


def problem(settings: str = ""):
    return parse_problem(SOURCE + settings, name="relu")


def brief(rules: tuple[str, ...], device: str = "cuda:0") -> render.ProblemBrief:
    return render.ProblemBrief("relu", SOURCE, device=device, rules=rules, domain="pytorch")


def rules(settings: str = "", **cfg: object) -> tuple[str, ...]:
    return pr.agent_rules(problem(settings), EvaluationConfig(**cfg))  # type: ignore[arg-type]


# -- the tables -------------------------------------------------------------------------------


@pytest.mark.parametrize("check", [*static.REGISTRY, static.OWN_KERNELS_CPU], ids=lambda c: c.name)
def test_every_static_check_has_prompt_text(check: static.StaticCheck) -> None:
    assert check.why.strip(), f"static check {check.name!r} has no prompt text (`why`)"
    text = check.prompt_text()
    assert f"`{check.name}`" in text and check.doc in text and check.why in text


def test_every_validator_and_policy_has_prompt_text() -> None:
    stages = {s.name for s in (*pt.DEFAULT_GRAPH, pt.STRICT_EXTRA)}
    assert stages <= set(pr.STAGE_RULES), f"validators without prompt text: {stages - set(pr.STAGE_RULES)}"
    assert set(get_args(static.IntegrityPolicy)) <= set(pr.POLICY_RULES)


def test_the_strict_share_stated_is_the_one_the_worker_enforces() -> None:
    tree = ast.parse(PROVENANCE.read_text(encoding="utf-8"))
    value = next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "OWN_TIME_FRACTION" for t in n.targets)
                 and isinstance(n.value, ast.Constant))
    assert value == 0.5, "the prompts say 'at least half': update STAGE_RULES and POLICY_RULES"
    assert "at least half" in pr.STAGE_RULES["provenance"] and "at least half" in pr.POLICY_RULES["strict"]


def test_the_rules_follow_the_policy_the_correctness_rule_and_the_graph() -> None:
    lenient = rules()
    assert [r for r in lenient if r.startswith("static check")] == list(static.agent_rules("lenient"))
    assert any("`exception_fallback`" in r and "try/except can hide a failing kernel" in r for r in lenient)
    assert not any("own_kernels" in r or "`provenance`" in r for r in lenient)
    assert any(r.startswith("integrity policy `lenient`") for r in lenient)
    assert any("correctness rule `reference`" in r and "float32 atol=0.0001, rtol=0.0001" in r for r in lenient)
    # issue 57: the writers are told that precision is judged by what ran, and how to keep Triton exact
    [said] = [r for r in lenient if r.startswith("correctness rule `reference`")]
    assert "precision downgrade and fails whatever its error" in said and "autocast" in said
    [gpu] = [r for r in rules(device="cuda") if r.startswith("correctness rule `reference`")]
    assert 'input_precision="ieee"' in gpu  # Triton's TF32 default, told where it applies
    assert "3 times the reference's own error when your design was seen" in said and "1.5 times" in said
    assert any("stage `shapes`" in r and "batch_size=48, dim=3072" in r for r in lenient)  # the variants it runs
    strict = rules(integrity="strict", correctness={"mode": "calibrated", "factor": 8.0})
    assert sum("static check `own_kernels`" in r for r in strict) == 2  # on a GPU and on the CPU
    assert any(r.startswith("stage `provenance`") for r in strict)
    assert any("correctness rule `calibrated`" in r and "8 times eager" in r for r in strict)
    narrowed = rules('\nSTRATAGEM = {"validators": ["static_checks", "load", "correctness"], "shapes": False}\n')
    stages = [r.split("`")[1] for r in narrowed if r.startswith("stage ")]
    assert stages == ["static_checks", "load", "correctness"]


def test_a_device_picks_its_own_kernels_rule() -> None:
    cpu = static.agent_rules("strict", "cpu")
    assert sum("own_kernels" in r for r in cpu) == 1 and any("C++ function of its own" in r for r in cpu)


def test_agent_facts_carry_the_rules_into_the_state_and_the_brief() -> None:
    p = problem()
    facts = get_domain(p.domain).open(p, EvaluationConfig()).agent_facts()
    state = SearchState(problem=p, designs=(), iteration=1, device="cuda:0", **facts)
    b = render.ProblemBrief.from_state(state, state.integrity)
    assert b.rules == rules() and b.correctness == "reference"


# -- every role that plans or writes code states them -----------------------------------------


def every_rule_in(text: str, expected: tuple[str, ...]) -> None:
    missing = [r for r in expected if r not in text]
    assert not missing, f"{len(missing)} rules missing, first: {missing[:1]}"


def code_prompts(b: render.ProblemBrief) -> dict[str, str]:
    view = DesignView("a" * 64, "class ModelNew: pass\n", "valid", 1, runtime_ms=0.5, speedup=1.2,
                      speedup_low=1.1, speedup_high=1.3)
    wrong = Feedback("b" * 64, "invalid", "[correctness] wrong", validator="correctness", kind="wrong_output",
                     max_abs_err=0.5)
    broken = Feedback("c" * 64, "invalid", "[static_checks] except", validator="static_checks", kind="rejected",
                      error_tail="`except Exception`")
    return {
        "strategist": render.render_strategist(b, render.Curated(), iteration=1),
        "implementor": render.render_implementor(b, Plan("innovate", instructions="fuse"), (),
                                                 worker="implementor-1", max_attempts=3),
        "review": render.render_review(b, view),
        "pike.optimize": pike.optimize(b, "fuse"),
        "pike.improve": pike.improve(b, view),
        "pike.fix_error": pike.fix(b, "class ModelNew: pass\n", broken),
        "pike.fix_correctness": pike.fix(b, "class ModelNew: pass\n", wrong),
        "pike.mutate": pike.mutate(b, view),
        "pike.crossover": pike.crossover(b, view, "speed 1", [view], []),
    }


@pytest.mark.parametrize("settings, cfg", [("", {}), ("", {"integrity": "strict"}),
                                           ("", {"correctness": {"mode": "calibrated"}})])
def test_every_code_writing_prompt_states_every_rule(settings: str, cfg: dict) -> None:
    expected = rules(settings, **cfg)
    for name, text in code_prompts(brief(expected)).items():
        try:
            every_rule_in(text, expected)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_calibrated_tolerances_are_not_shown_as_if_they_decided() -> None:
    b = render.ProblemBrief("relu", SOURCE, tolerances={"float32": {"atol": 1e-4, "rtol": 1e-4}},
                            correctness="calibrated", rules=rules(correctness={"mode": "calibrated"}), domain="pytorch")
    text = render.render_implementor(b, Plan("innovate", instructions="x"), (), worker="i", max_attempts=1)
    assert "Tolerances: none fixed: the `calibrated` correctness rule" in text
    assert not re.search(r"Tolerances: float32", text)


def test_the_first_strategist_prompt_of_a_run_has_the_rules_and_the_budget(tmp_path) -> None:
    from agent_fakes_path import PROBLEM, first_prompt_of_a_run

    from stratagem.domains.pytorch.problem import load_problem

    prompt = first_prompt_of_a_run(tmp_path)
    every_rule_in(prompt, pr.agent_rules(load_problem(PROBLEM), EvaluationConfig(device="cpu")))  # the run's device
    assert "## Budget\n\nThis is iteration 1 of 1." in prompt
    assert "This is the last iteration (the run ends after iteration 1)" in prompt
