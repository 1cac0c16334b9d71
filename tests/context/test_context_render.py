"""Snapshot tests of every prompt template rendered from fixed inputs.

A rendering that differs from `snapshots/<name>.md` fails. To accept a deliberate change, run
with `STRATAGEM_UPDATE_SNAPSHOTS=1` (the snapshots are rewritten; review the diff) and commit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from stratagem.context import render
from stratagem.context.curate import Curated
from stratagem.core.search import DesignView, Feedback, Measures, Plan

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("STRATAGEM_UPDATE_SNAPSHOTS") == "1"

RULES = (
    "files: a design is one Python file, `candidate.py`, that defines `class ModelNew(nn.Module)`",
    "integrity policy `lenient`: any honest code counts",
    "static check `exception_fallback`: No except handlers. Why: try/except can hide a failing kernel behind a "
    "fallback; let errors propagate.",
    "stage `correctness`: the outputs are compared with the reference's on fresh random inputs",
)
"""A short fixed rule list: the real one is generated from the domain's tables and tested in
test_rules_in_prompts.py, so a rule added there does not churn these snapshots."""

PROBLEM = render.ProblemBrief(
    name="19_ReLU",
    source="import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
           "        return torch.relu(x)\n",
    device="cuda:0 (NVIDIA H200)",
    reference_ms={"eager": 0.0412, "compile": 0.0388},
    tolerances={"float32": {"atol": 1e-4, "rtol": 1e-4}},
    integrity="lenient",
    rules=RULES, domain="pytorch",
)
BEST = DesignView("1" * 64, "class ModelNew:  # fused\n    pass\n", "valid", 3, "refine",
                  "implementor-1", ("0" * 64,), runtime_ms=0.0205, speedup=2.01, speedup_low=1.95,
                  speedup_high=2.08, speedup_compared=1.89, compared_low=1.80, compared_high=1.97,
                  measures=Measures(runtime_q1_ms=0.0201, runtime_q3_ms=0.0209, reference_ms=0.0431, pairs=20))
WORST = DesignView("2" * 64, "class ModelNew:  # slow\n    pass\n", "valid", 1, "innovate",
                   "implementor-2", runtime_ms=0.0398, speedup=1.04, speedup_low=0.97, speedup_high=1.10,
                   measures=Measures(reference_ms=0.0414))
RECENT = DesignView("3" * 64, "class ModelNew:  # recent\n    pass\n", "invalid", 2, "combine",
                    "implementor-1", ("1" * 64, "2" * 64),
                    report="[correctness] wrong: max abs diff 0.5 at output 0")
FAILED = DesignView("4" * 64, "class ModelNew:  # broken\n", "error", 2, "innovate",
                    "implementor-2", report="[load] compile: nvcc failed: error: expected ';'")
TOP = DesignView("7" * 64, "class ModelNew:  # the run's best, from another plan\n    pass\n", "valid", 3, "fix",
                 "implementor-3", ("2" * 64,), runtime_ms=0.0180, speedup=2.31, speedup_low=2.25, speedup_high=2.37,
                 created_at=5.0, measures=Measures(reference_ms=0.0416))
RUN = (replace(WORST, created_at=1.0), replace(BEST, created_at=2.0), replace(RECENT, created_at=3.0, iteration=4),
       replace(FAILED, created_at=4.0, iteration=4), TOP)
"""The run's designs, oldest first: the Implementor's prompt shows its best (TOP, not cited) and the
attempts since the first design its plan builds on."""
CURATED = Curated(best=(BEST,), worst=(WORST,), recent=(RECENT,), failed=(FAILED,), total=9,
                  newest=(BEST.id, RECENT.id))
PLAN = Plan("combine", ("1" * 64, "2" * 64), "1111 fuses, 2222 vectorizes",
            "Use one Triton kernel with BLOCK_SIZE=1024 and float4 loads.")
BUDGET = render.BudgetBrief(4, 10, "iteration", (render.BudgetLine("queries", 40, 26),
                                                  render.BudgetLine("money", 2.0, 1.16)), patience=3)


def renderings() -> dict[str, Callable[[], str]]:
    return {
        "strategist.instructions": lambda: render.instructions("strategist", analyst=True, domain="pytorch"),
        "strategist.instructions_no_analyst": lambda: render.instructions("strategist",
                                                                          analyst=False, domain="pytorch"),
        "strategist.prompt": lambda: render.render_strategist(PROBLEM, CURATED, iteration=4, budget=BUDGET),
        "strategist.prompt_first": lambda: render.render_strategist(PROBLEM, Curated(),
                                                                    iteration=1),
        "strategist.fallback_refine": lambda: "\n---\n".join(
            render.fallback_plan_text("refine", "server: 503", domain="pytorch")),
        "strategist.instructions_profile": lambda: render.instructions("strategist", analyst=False, profile=True,
                                                                       domain="pytorch"),
        "analyst.instructions": lambda: render.instructions("analyst", domain="pytorch"),
        "analyst.instructions_profile": lambda: render.instructions("analyst", profile=True, domain="pytorch"),
        "analyst.prompt": lambda: render.render_analyst(
            "Why is 1111 faster than 2222?", [BEST, WORST, FAILED], docs="2 files (a.md, b.md)", domain="pytorch"),
        "implementor.instructions": lambda: render.instructions("implementor", domain="pytorch"),
        "implementor.prompt": lambda: render.render_implementor(
            PROBLEM, PLAN, [BEST, WORST], worker="implementor-2", max_attempts=6, designs=RUN),
        "implementor.static_rejection": lambda: render.fill(
            "implementor", "static_rejection", reason="candidate.py defines no `class ModelNew`", domain="pytorch"),
        "implementor_feedback.prompt": lambda: render.render_implementor_feedback(
            Feedback("5" * 64, "invalid", "[correctness] wrong: max abs diff 0.5\n"
                     "Skipped: timing (needs correctness)"), attempt=2, max_attempts=6, domain="pytorch"),
        "review.instructions": lambda: render.instructions("review", domain="pytorch"),
        "review.prompt": lambda: render.render_review(
            PROBLEM, DesignView("6" * 64, "class ModelNew:  # suspicious\n    pass\n", "valid",
                                runtime_ms=0.0011, speedup=37.5), BEST),
        "summarizer.instructions": lambda: render.instructions("summarizer", domain=None),
        "summarizer.prompt": lambda: render.render_summarizer(
            "USER: write a kernel\n\nASSISTANT: here it is"),
        "summarizer.summary": lambda: render.summary_message("The kernel compiles; fix the mask.")
        + "\n---\n" + render.summary_acknowledgement(),
    }


@pytest.mark.parametrize("name", sorted(renderings()))
def test_snapshot(name: str) -> None:
    text = renderings()[name]() + "\n"
    path = SNAPSHOTS / f"{name}.md"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"missing snapshot {path.name}: run with STRATAGEM_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(encoding="utf-8"), (
        f"{name} changed; if deliberate, rerun with STRATAGEM_UPDATE_SNAPSHOTS=1 and review"
    )


def test_every_template_is_snapshotted() -> None:
    covered = {n.split(".")[0] for n in renderings()}
    assert set(render.ROLES) <= covered


def test_rendered_prompts_have_no_unfilled_placeholders() -> None:
    for name, make in renderings().items():
        text = make()
        assert not re.search(r"\$(?:[A-Za-z_{]|$)", text.replace("$$", "")), name  # money ($0.84) is no placeholder
        assert "<!-- section" not in text, name


def test_design_block_shows_status_lineage_and_report() -> None:
    block = render.render_design(RECENT, domain="pytorch")
    assert "`333333333333` (invalid)" in block
    assert "from `111111111111`, `222222222222`" in block
    assert "max abs diff 0.5" in block
    assert "Failure report" not in render.render_design(BEST, domain="pytorch")
