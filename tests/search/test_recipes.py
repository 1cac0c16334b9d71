"""The `recipes` policy and its catalog: applicability, rendering (static checks, numerics on
tiny shapes), the batch logic against a fake session, resume, budgets, and one real CPU
evaluation through the harness."""

from __future__ import annotations

import ast
import asyncio
import textwrap
import types
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.core.problem import Problem, content_hash
from stratagem.core.search import AgentCall, DesignView, Feedback, SearchState
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem, parse_problem
from stratagem.domains.pytorch.recipes import catalog as rc
from stratagem.domains.pytorch.recipes.policy import RecipesPolicy
from stratagem.domains.pytorch.static.checks import run_static_checks
from stratagem.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(ROOT.glob("examples/*/problem.py"))
TIGHT = {"float32": {"atol": 1e-4, "rtol": 1e-4}}
LOOSE = {"float32": {"atol": 1e-2, "rtol": 1e-2}}
MEDIUM = {"float32": {"atol": 1e-3, "rtol": 1e-3}}
COMPILES_GPU = ["compile", "compile-reduce-overhead", "compile-max-autotune-no-cudagraphs",
                "compile-max-autotune"]

ATTENTION = '''\
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim: int, heads: int):
        super(Model, self).__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = F.softmax(att, dim=-1)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)


batch_size = 2
seq_len = 16
dim = 32
heads = 4


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, heads]
'''


def example(name: str) -> Problem:
    return load_problem(ROOT / "examples" / name / "problem.py")


def attention(forward: str | None = None) -> Problem:
    src = ATTENTION
    if forward is not None:
        start = src.index("    def forward")
        end = src.index("\n\nbatch_size")
        src = src[:start] + textwrap.indent(textwrap.dedent(forward).strip(), "    ") + src[end:]
    return parse_problem(src, name="attention")


def names(problem: Problem, tolerances: dict, on_gpu: bool) -> list[str]:
    return [r.name for r in rc.CATALOG if r.applies(problem, tolerances, on_gpu)]


# -- applicability -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gpu_loose", "cpu_tight"),
    [
        ("01_elementwise", [], []),
        ("02_reduction", [], []),
        ("03_softmax", [], []),
        ("04_matmul", ["autocast-bf16", "autocast-fp16"], []),
        ("05_conv", ["channels_last", "autocast-bf16", "autocast-fp16"], ["channels_last"]),
        ("06_fused_block", [], []),
    ],
)
def test_applicability_per_example(name: str, gpu_loose: list[str], cpu_tight: list[str]) -> None:
    p = example(name)
    assert names(p, LOOSE, True) == ["inference_mode", *gpu_loose, *COMPILES_GPU]
    assert names(p, TIGHT, False) == ["inference_mode", *cpu_tight, "compile",
                                      "compile-max-autotune"]


def test_autocast_follows_the_tolerance() -> None:
    p = example("04_matmul")
    assert "autocast-bf16" not in names(p, MEDIUM, True)
    assert "autocast-fp16" in names(p, MEDIUM, True)  # fp16 needs only 1e-3
    assert "autocast-fp16" not in names(p, MEDIUM, False)  # GPU only
    assert "autocast-bf16" in names(p, LOOSE, False)
    assert not {"autocast-bf16", "autocast-fp16"} & set(names(p, {}, True))  # no float32 entry


def test_sdpa_applies_only_to_the_attention_pattern() -> None:
    assert "sdpa" in names(attention(), TIGHT, False)
    for ex in EXAMPLES:
        assert "sdpa" not in names(load_problem(ex), LOOSE, True)


@pytest.mark.parametrize(
    "forward",
    [
        """
        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v
        """,
        """
        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            scores = torch.matmul(q, k.transpose(-1, -2))
            probs = scores.softmax(-1)
            return torch.matmul(probs, v)
        """,
        """
        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            att = 0.125 * torch.bmm(q, k.transpose(1, 2))
            return torch.bmm(F.softmax(att, dim=-1), v)
        """,
        """
        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            with torch.no_grad():
                att = torch.softmax(q @ k.mT * 0.5, dim=-1)
                y = att @ v
            return y
        """,
    ],
)
def test_sdpa_matches_variants_and_computes_the_same(forward: str) -> None:
    p = attention(forward)
    src = rc.render(p.source, [rc.BY_NAME["sdpa"]])
    assert "scaled_dot_product_attention" in src and "softmax" not in src.split("class ModelNew")[0]
    assert run_static_checks(p, src).outcome == "passed"
    assert_same_outputs(p, src, atol=1e-5)


@pytest.mark.parametrize(
    "forward",
    [
        """
        def forward(self, x):  # masked: not the plain pattern
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            att = q @ k.transpose(-2, -1)
            att = att.masked_fill(att > 10.0, float('-inf'))
            return torch.softmax(att, dim=-1) @ v
        """,
        """
        def forward(self, x):  # softmax over another dim
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            return torch.softmax(q @ k.transpose(-2, -1), dim=1) @ v
        """,
        """
        def forward(self, x):  # q changes between the scores and their use
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            att = q @ k.transpose(-2, -1)
            q = q * 2.0
            return torch.softmax(att, dim=-1) @ v + q
        """,
        """
        def forward(self, x):  # q changes in a branch
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            att = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
            if x.shape[0] > 0:
                q = q * 2.0
                return att @ v + q
            return att @ v
        """,
    ],
)
def test_sdpa_leaves_other_code_alone(forward: str) -> None:
    assert "sdpa" not in names(attention(forward), LOOSE, True)


# -- rendering ---------------------------------------------------------------------------------


def _combination(applicable: Sequence[rc.Recipe]) -> list[rc.Recipe]:
    out: dict[str, rc.Recipe] = {}
    for r in applicable:
        out.setdefault(r.group, r)
    return list(out.values())


@pytest.mark.parametrize(
    "path", [*EXAMPLES, None], ids=[p.parent.name for p in EXAMPLES] + ["attention"]
)
def test_every_rendering_passes_the_static_checks(path: Path | None) -> None:
    p = load_problem(path) if path is not None else attention()
    applicable = [r for r in rc.CATALOG if r.applies(p, LOOSE, True)]
    renders = [[r] for r in applicable] + [_combination(applicable)]
    for recipes in renders:
        src = rc.render(p.source, recipes)
        ast.parse(src)
        res = run_static_checks(p, src)
        assert res.outcome == "passed", (rc.combination_name(recipes), res.reason)
        warned = {w["check"] for w in res.details["warnings"]}  # type: ignore[union-attr]
        assert warned <= {"precision"}
        assert ("precision" in warned) == any(r.wrap.autocast for r in recipes)


def test_the_reference_is_copied_and_renamed() -> None:
    src = rc.render(example("01_elementwise").source, [rc.BY_NAME["inference_mode"]])
    tree = ast.parse(src)
    names_used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "Model" not in names_used
    assert "super(_Reference, self).__init__()" in src
    top = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert top == {"_Reference", "ModelNew"}  # get_inputs / get_init_inputs dropped
    assert "batch_size = 8192" in src  # size constants kept


def test_renaming_avoids_names_the_problem_uses() -> None:
    clash = ATTENTION.replace("batch_size = 2\n", "batch_size = 2\n_Reference = 3\n")
    src = clash + textwrap.dedent(
        """
        STRATAGEM = {"correctness_trials": 3}
        if __name__ == "__main__":
            print(Model(32, 4))
        """
    )
    p = parse_problem(src, name="clash")
    out = rc.render(p.source, [rc.BY_NAME["inference_mode"]])
    assert "class _Reference_(nn.Module)" in out and "_Reference = 3" in out
    assert "STRATAGEM" not in out and "__main__" not in out
    assert run_static_checks(p, out).outcome == "passed"


def test_incompatible_recipes_are_refused() -> None:
    with pytest.raises(ValueError, match="group 'compile'"):
        rc.render(ATTENTION, [rc.BY_NAME["compile"], rc.BY_NAME["compile-max-autotune"]])
    with pytest.raises(ValueError):
        rc.render(ATTENTION, [])


def _shrunk(module: types.ModuleType, problem: Problem) -> None:
    for k, v in problem.size_constants.items():
        if isinstance(v, int):
            setattr(module, k, min(v, 16))


def assert_same_outputs(problem: Problem, source: str, atol: float) -> None:
    """Run reference and candidate in this process on tiny shapes (no harness, no compile)."""
    import torch

    ref = types.ModuleType("recipe_test_reference")
    exec(compile(problem.source, "reference.py", "exec"), ref.__dict__)  # noqa: S102
    _shrunk(ref, problem)
    cand = types.ModuleType("recipe_test_candidate")
    exec(compile(source, "candidate.py", "exec"), cand.__dict__)  # noqa: S102
    init = ref.get_init_inputs()
    torch.manual_seed(0)
    model = ref.Model(*init)
    torch.manual_seed(0)
    new = cand.ModelNew(*init)
    inputs = ref.get_inputs()
    with torch.no_grad():
        want = model(*[x.clone() for x in inputs])
        got = new(*[x.clone() for x in inputs])
    assert got.dtype == want.dtype and got.shape == want.shape and got.is_contiguous()
    torch.testing.assert_close(got, want, atol=atol, rtol=atol)


@pytest.mark.parametrize("name", ["04_matmul", "05_conv", "06_fused_block"])
def test_eager_recipes_compute_the_same(name: str) -> None:
    p = example(name)
    eager = [r for r in rc.CATALOG if r.applies(p, LOOSE, False) and not r.wrap.compile_mode]
    for r in [*([x] for x in eager), eager]:
        recipes = r if isinstance(r, list) else [r]
        atol = 5e-2 if any(x.wrap.autocast for x in recipes) else 1e-5
        assert_same_outputs(p, rc.render(p.source, recipes), atol)


# -- the policy --------------------------------------------------------------------------------


class FakeSession:
    """A Session that records what it is asked and answers with preset speedups."""

    def __init__(self, speedups: dict[str, float | None], budget_after: int | None = None) -> None:
        self.speedups = speedups
        self.budget_after = budget_after
        self.designs: list[DesignView] = []
        self.calls: list[dict] = []
        self.status: list[tuple[str, str]] = []

    async def evaluate(self, source: str, *, strategy: str, parents: Sequence[str] = (),
                       author: str = "", tags: dict | None = None) -> Feedback:
        name = author.removeprefix("recipe:")
        speedup = self.speedups.get(name)
        status = "valid" if speedup is not None else "invalid"
        did = content_hash(source)[:16]
        self.calls.append({"author": author, "strategy": strategy, "parents": tuple(parents),
                           "source": source})
        self.designs.append(DesignView(id=did, source=source, status=status, author=author,
                                       strategy=strategy, parents=tuple(parents),
                                       speedup=speedup, runtime_ms=1.0 if speedup else None,
                                       tags=dict(tags or {})))
        return Feedback(did, status, "All validators passed.", 1.0, speedup)

    def record_call(self, call: AgentCall) -> None:
        raise AssertionError("the recipes policy makes no agent calls")

    def budget_left(self) -> str | None:
        if self.budget_after is not None and len(self.calls) >= self.budget_after:
            return "max_gpu_seconds"
        return None

    def set_status(self, worker: str, status: str) -> None:
        self.status.append((worker, status))

    def state(self, problem: Problem, tolerances: dict, iteration: int = 1) -> SearchState:
        return SearchState(problem=problem, designs=tuple(self.designs), iteration=iteration,
                           device="cpu", tolerances=tolerances)


MATMUL_CPU = ["inference_mode", "autocast-bf16", "compile", "compile-max-autotune"]


def test_first_iteration_tries_every_applicable_recipe_alone() -> None:
    p = example("04_matmul")
    s = FakeSession({})
    res = asyncio.run(RecipesPolicy(None, on_gpu=False).iterate(s.state(p, LOOSE), s))
    assert [c["author"] for c in s.calls] == [f"recipe:{n}" for n in MATMUL_CPU]
    assert all(c["strategy"] == "recipe" and c["parents"] == () for c in s.calls)
    assert s.status[0] == ("recipes", "evaluating inference_mode")
    assert res.plan is not None and res.plan.strategy == "recipes"
    assert res.plan.instructions == ", ".join(MATMUL_CPU)
    assert res.design_ids == tuple(d.id for d in s.designs) and not res.exhausted
    for c in s.calls:
        assert run_static_checks(p, c["source"]).outcome == "passed"


def test_on_gpu_follows_the_state_device() -> None:
    p = example("01_elementwise")
    s = FakeSession({})
    state = SearchState(problem=p, designs=(), iteration=1, device="cuda:0", tolerances=TIGHT)
    asyncio.run(RecipesPolicy().iterate(state, s))
    assert [c["author"] for c in s.calls] == ["recipe:inference_mode"] + [
        f"recipe:{n}" for n in COMPILES_GPU]


def test_second_iteration_combines_the_helpful_ones_then_stops() -> None:
    p = example("04_matmul")
    speedups = {"inference_mode": 1.02, "autocast-bf16": 1.5, "compile": 3.0,
                "compile-max-autotune": 3.5}
    s = FakeSession(speedups)
    policy = RecipesPolicy.from_config(load_config(None, {}), on_gpu=False)
    asyncio.run(policy.iterate(s.state(p, LOOSE), s))
    singles = {d.author: d.id for d in s.designs}
    res = asyncio.run(policy.iterate(s.state(p, LOOSE, 2), s))
    combo = s.calls[-1]
    assert combo["author"] == "recipe:inference_mode+autocast-bf16+compile-max-autotune"
    assert combo["parents"] == tuple(singles[f"recipe:{n}"] for n in
                                     ["inference_mode", "autocast-bf16", "compile-max-autotune"])
    assert res.exhausted and res.design_ids == (s.designs[-1].id,)
    assert res.plan is not None and res.plan.evidence == combo["parents"]
    src = combo["source"]
    assert "torch.inference_mode()" in src and "torch.bfloat16" in src
    assert "mode='max-autotune'" in src
    assert run_static_checks(p, src).outcome == "passed"
    n = len(s.calls)
    again = asyncio.run(policy.iterate(s.state(p, LOOSE, 3), s))
    assert again.exhausted and again.plan is None and len(s.calls) == n


def test_only_recipes_that_beat_inference_mode_are_combined() -> None:
    p = example("04_matmul")
    # autocast is slower than inference_mode alone; compile failed; max-autotune helps alone.
    s = FakeSession({"inference_mode": 1.3, "autocast-bf16": 1.2, "compile": None,
                     "compile-max-autotune": 2.0})
    policy = RecipesPolicy(None, on_gpu=False)
    asyncio.run(policy.iterate(s.state(p, LOOSE), s))
    assert [r.name for r in policy.combination(s.state(p, LOOSE))] == [
        "inference_mode", "compile-max-autotune"]
    s2 = FakeSession({"inference_mode": 0.99, "autocast-bf16": 1.2, "compile": 0.9,
                      "compile-max-autotune": None})
    asyncio.run(policy.iterate(s2.state(p, LOOSE), s2))
    assert [r.name for r in policy.combination(s2.state(p, LOOSE))] == ["autocast-bf16"]
    n = len(s2.calls)
    res = asyncio.run(policy.iterate(s2.state(p, LOOSE, 2), s2))
    assert res.exhausted and res.plan is None and len(s2.calls) == n  # nothing to combine


@pytest.mark.parametrize("speedups, says", [
    ({"inference_mode": 0.99, "compile": 3.0, "compile-max-autotune": 3.5},
     "two helped alone (compile 3.00x, compile-max-autotune 3.50x), but compile and compile-max-autotune are "
     "alternatives"),
    ({"inference_mode": 1.3, "autocast-bf16": 1.2, "compile-max-autotune": 1.25},
     "three helped alone (inference_mode 1.30x, autocast-bf16 1.20x, compile-max-autotune 1.25x), but "
     "autocast-bf16 and compile-max-autotune did not beat inference_mode alone"),
    ({"compile": 2.0}, "only compile 2.00x helped, so there is nothing to combine"),
    ({"inference_mode": 0.9}, "none was faster than eager by more than its interval"),
])
def test_the_note_says_why_nothing_was_combined(speedups: dict[str, float], says: str) -> None:
    """Issue 23: the note said 'fewer than two helped' when two had helped (they were
    alternatives: two torch.compile modes)."""
    p = example("04_matmul")
    s = FakeSession(speedups)
    policy = RecipesPolicy(None, on_gpu=False)
    asyncio.run(policy.iterate(s.state(p, LOOSE), s))
    n = len(s.calls)
    res = asyncio.run(policy.iterate(s.state(p, LOOSE, 2), s))
    assert res.exhausted and len(s.calls) == n
    assert says in res.note and "fewer than two" not in res.note


def test_the_note_names_recipes_whose_timing_did_not_settle() -> None:
    p = example("04_matmul")
    s = FakeSession({"inference_mode": 1.15})
    policy = RecipesPolicy(None, on_gpu=False)
    asyncio.run(policy.iterate(s.state(p, LOOSE), s))
    s.designs = [replace(d, status="unstable", speedup_low=1.0, speedup_high=1.51) if d.speedup else d
                 for d in s.designs]
    res = asyncio.run(policy.iterate(s.state(p, LOOSE, 2), s))
    assert "(inference_mode 1.15x [1.00, 1.51]: timing unstable, so not counted)" in res.note


def test_resume_skips_what_was_tried() -> None:
    p = example("04_matmul")
    s = FakeSession({"inference_mode": 1.1, "compile": 2.0}, budget_after=2)
    policy = RecipesPolicy(None, on_gpu=False)
    first = asyncio.run(policy.iterate(s.state(p, LOOSE), s))
    assert [c["author"] for c in s.calls] == ["recipe:inference_mode", "recipe:autocast-bf16"]
    assert "max_gpu_seconds" in first.note and len(first.design_ids) == 2
    # budget still spent: nothing more is evaluated
    asyncio.run(policy.iterate(s.state(p, LOOSE, 2), s))
    assert len(s.calls) == 2
    # a resumed run (more budget) goes on with the untried recipes only
    s.budget_after = None
    asyncio.run(policy.iterate(s.state(p, LOOSE, 2), s))
    assert [c["author"] for c in s.calls[2:]] == ["recipe:compile", "recipe:compile-max-autotune"]
    assert [r.name for r in policy.untried(s.state(p, LOOSE))] == []


def test_recipe_restriction_and_unknown_names() -> None:
    p = example("04_matmul")
    s = FakeSession({"compile": 2.0})
    cfg = load_config(None, {"search": {"recipes": ["compile", "sdpa"]}})
    policy = RecipesPolicy.from_config(cfg, on_gpu=False)
    asyncio.run(policy.iterate(s.state(p, LOOSE), s))
    assert [c["author"] for c in s.calls] == ["recipe:compile"]  # sdpa does not apply
    res = asyncio.run(policy.iterate(s.state(p, LOOSE, 2), s))
    assert res.exhausted and len(s.calls) == 1
    with pytest.raises(ConfigError, match="unknown recipes \\['tf32'\\].*compile-max-autotune"):
        RecipesPolicy(["compile", "tf32"], on_gpu=False)
    review = policy.review(s.designs[0], s.state(p, LOOSE), s)  # type: ignore[arg-type]
    assert asyncio.run(review) is None


# -- one real evaluation -----------------------------------------------------------------------


def test_inference_mode_candidate_is_valid_on_the_cpu(fixtures: Path) -> None:
    from stratagem.evaluation.api import make_evaluator

    # problem_linear, not problem_relu: relu's 4 MiB working set stays in the CPU's caches, and
    # the roofline (calibrated on DRAM bandwidth) can then reject even the plain reference.
    problem = load_problem(fixtures / "problem_linear.py")
    src = rc.render(problem.source, [rc.BY_NAME["inference_mode"]])
    cfg = load_config(None, {"evaluation": {
        "device": "cpu", "timing": {"budget_ms": 50, "warmup_ms": 5}, "correctness_trials": 2,
        "baselines": ["eager"]}}).evaluation
    ev = asyncio.run(make_evaluator(cfg).evaluate(problem, candidate_design(src)))
    assert ev.verdict.status == "valid", ev.verdict.report()


def test_autocast_is_never_tried_under_the_reference_rule_whatever_the_tolerance() -> None:
    """Issue 57: the default rule rejects a design below the reference's precision whatever its
    error, so an autocast recipe would be an evaluation spent on a certain rejection; under
    `fixed` the declared tolerance still decides."""
    p = example("04_matmul")
    for mode, tried in (("reference", False), ("fixed", True)):
        s = FakeSession({})
        state = SearchState(problem=p, designs=(), iteration=1, device="cpu", tolerances=LOOSE,
                            correctness_mode=mode)
        asyncio.run(RecipesPolicy(None, on_gpu=False).iterate(state, s))
        assert ("recipe:autocast-bf16" in [c["author"] for c in s.calls]) is tried, mode
