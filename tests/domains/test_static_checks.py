"""The parent-side `static_checks` validator: parse, ModelNew presence, signature compatibility."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from stratagem.domains.pytorch.problem import load_problem, parse_problem
from stratagem.domains.pytorch.static.checks import (
    DEFAULT_CHECKS,
    REGISTRY,
    Finding,
    StaticCheck,
    run_static_checks,
)


def _checks(*names: str) -> tuple:
    """The registry's checks of these names (registry order)."""
    return tuple(c for c in REGISTRY if c.name in names)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE_CANDIDATES = sorted(ROOT.glob("examples/*/candidates/*.py"))


@pytest.fixture(scope="module")
def problem():
    # Model.__init__(self, dim), Model.forward(self, x)
    return load_problem(FIXTURES / "problem_linear.py")


def cand(init: str = "self, dim", forward: str = "self, x", extra: str = "") -> str:
    return textwrap.dedent(
        f"""
        import torch

        class ModelNew(torch.nn.Module):
            def __init__({init}):
                super().__init__()

            def forward({forward}):
                return x
        {extra}
        """
    )


def test_fixture_candidates_pass(problem):
    for name in ("good_addmm.py", "wrong_scale.py"):  # wrong_scale is wrong only at runtime
        r = run_static_checks(problem, (FIXTURES / "candidates" / name).read_text())
        assert r.outcome == "passed", (name, r.reason)
        assert r.name == "static_checks"
        assert r.kind is None and r.reason is None
        assert r.details["checks"] == [c.name for c in DEFAULT_CHECKS]
        assert r.details["checks"][:2] == ["model_new", "signatures"]


def test_syntax_error_is_malformed_naming_line(problem):
    src = "import torch\n\nclass ModelNew(:\n    pass\n"
    r = run_static_checks(problem, src)
    assert r.outcome == "failed"
    assert r.kind == "malformed"
    assert "line 3" in (r.reason or "")
    assert "candidate.py" in (r.reason or "")
    assert r.details["line"] == 3


def test_syntax_error_uses_given_filename(problem):
    r = run_static_checks(problem, "def (:\n", filename="mine.py")
    assert "mine.py" in (r.reason or "")


def test_no_model_new_fails(problem):
    r = run_static_checks(problem, "import torch\n\nclass Model(torch.nn.Module):\n    pass\n")
    assert r.outcome == "failed"
    assert r.kind == "malformed"  # the first rejecting check decides the kind
    assert "ModelNew" in (r.reason or "")
    # a `Model` of the candidate's own is no finding (KernelBench-format files define one)
    assert [x["check"] for x in r.details["rejections"]] == ["model_new"]


KERNELBENCH_FORMAT = (Path(__file__).resolve().parents[1] / "fixtures" / "candidates"
                      / "kernelbench_format.py").read_text()
"""A candidate file as another tool writes it: its own Model, inputs and size constants."""


def test_a_kernelbench_format_candidate_file_is_judged_by_its_model_new(problem):
    """A candidate file written by another tool, with its own Model, inputs and sizes."""
    r = run_static_checks(problem, KERNELBENCH_FORMAT)
    assert r.outcome == "passed", r.details
    # but the problem's own names stay out of reach: imported, or used with no definition
    for src in ("from stratagem_reference import get_inputs\n" + KERNELBENCH_FORMAT.replace("def get_inputs", "def _gi"),
                KERNELBENCH_FORMAT.replace("def get_inputs():\n    return [torch.randn(batch_size, dim)]\n",
                                           "x = get_inputs()\n")):
        bad = run_static_checks(problem, src)
        assert bad.outcome == "failed"
        assert "reference_access" in [x["check"] for x in bad.details["rejections"]]


def test_model_new_without_forward_or_bases_fails(problem):
    src = "class ModelNew:\n    def __init__(self, dim):\n        pass\n"
    r = run_static_checks(problem, src)
    assert r.outcome == "failed"
    assert "forward" in (r.reason or "")


def test_model_new_inheriting_forward_passes(problem):
    src = "import torch\n\nclass ModelNew(torch.nn.Linear):\n    pass\n"
    assert run_static_checks(problem, src).outcome == "passed"


@pytest.mark.parametrize(
    "forward",
    ["self, x, y", "self", "self, x, y, z=1"],
    ids=["extra-required", "too-few", "extra-required-with-default-after"],
)
def test_incompatible_forward_fails_signatures(problem, forward):
    r = run_static_checks(problem, cand(forward=forward))
    assert r.outcome == "failed"
    assert r.kind == "malformed"
    rej = r.details["rejections"]
    assert [x["check"] for x in rej] == ["signatures"]
    assert "forward" in rej[0]["message"]
    assert "forward" in (r.reason or "")
    assert "line" in (r.reason or "")


def test_incompatible_init_fails_signatures(problem):
    r = run_static_checks(problem, cand(init="self"))
    assert r.outcome == "failed"
    assert [x["check"] for x in r.details["rejections"]] == ["signatures"]
    assert "__init__" in (r.reason or "")


@pytest.mark.parametrize(
    "forward",
    ["self, x", "self, inp", "self, x, y=None", "self, *args", "self, x, *args, **kwargs",
     "self, x=None", "self, x, /", "self, x, *, flag=False"],
)
def test_compatible_forward_passes(problem, forward):
    r = run_static_checks(problem, cand(forward=forward))
    assert r.outcome == "passed", r.reason


def test_model_with_defaults_requires_candidate_to_accept_all_positions():
    prob = parse_problem(
        textwrap.dedent(
            """
            class Model:
                def __init__(self):
                    pass
                def forward(self, x, y=None):
                    return x
            def get_inputs():
                return []
            def get_init_inputs():
                return []
            """
        ),
        name="p",
    )
    assert run_static_checks(prob, cand(init="self", forward="self, x, y=None")).outcome == "passed"
    assert run_static_checks(prob, cand(init="self", forward="self, *a")).outcome == "passed"
    assert run_static_checks(prob, cand(init="self", forward="self, x")).outcome == "failed"


def test_required_keyword_only_param_fails_signatures(problem):
    assert run_static_checks(problem, cand(forward="self, x, *, scale")).outcome == "failed"


def test_rejections_in_registry_order_and_deterministic(problem):
    # No forward (model_new) and an incompatible __init__ (signatures): both reported, in order.
    src = "class ModelNew:\n    def __init__(self):\n        pass\n"
    r1 = run_static_checks(problem, src)
    r2 = run_static_checks(problem, src)
    assert r1 == r2
    assert [x["check"] for x in r1.details["rejections"]] == ["model_new", "signatures"]
    assert r1.kind == "malformed"
    # every finding is in the reason, in the same order
    reason = r1.reason or ""
    assert reason.index("forward") < reason.index("__init__")


def test_selected_checks_are_the_only_ones_run(problem):
    no_model_new = "x = 1\n"
    assert run_static_checks(problem, no_model_new, checks=_checks("signatures")).outcome == "passed"
    r = run_static_checks(problem, no_model_new, checks=_checks("model_new"))
    assert r.outcome == "failed"
    assert r.details["checks"] == ["model_new"]


def test_warn_severity_reports_without_failing(problem):
    def fn(ci):
        return [Finding("noisy", "uses a big constant", 2)]

    warn = StaticCheck("noisy", "warn", "rejected", "doc", fn)
    r = run_static_checks(problem, cand(), checks=(*DEFAULT_CHECKS, warn))
    assert r.outcome == "passed"
    assert r.details["warnings"] == [{"check": "noisy", "message": "uses a big constant", "line": 2}]


def test_reject_check_kind_is_reported(problem):
    rej = StaticCheck("ban", "reject", "rejected", "doc", lambda ci: [Finding("ban", "banned", 1)])
    r = run_static_checks(problem, cand(), checks=(*DEFAULT_CHECKS, rej))
    assert r.outcome == "failed" and r.kind == "rejected"
    assert "banned (line 1)" in (r.reason or "")


@pytest.mark.parametrize(
    "path",
    EXAMPLE_CANDIDATES
    or [pytest.param(None, marks=pytest.mark.skip(reason="no examples/*/candidates/*.py yet"))],
    ids=[f"{p.parent.parent.name}/{p.name}" for p in EXAMPLE_CANDIDATES] or None,
)
def test_example_candidates_pass_static_checks(path):
    prob = load_problem(path.parent.parent / "problem.py")
    r = run_static_checks(prob, path.read_text(encoding="utf-8"), filename=path.name)
    assert r.outcome == "passed", r.reason
