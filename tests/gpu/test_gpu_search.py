"""The search on a GPU (run on the GPU machine: pytest -m gpu): a short `recipes` run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.search.api import show_run, start_run

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


def test_recipes_run_on_a_gpu_finds_a_valid_faster_design(tmp_path):
    cfg = load_config(None, {"evaluation": {"device": "cuda", "workers_per_gpu": 1},
                             "search": {"recipes": ["inference_mode", "compile-reduce-overhead"]}})
    out = asyncio.run(start_run(ROOT / "examples/01_elementwise/problem.py", cfg, tmp_path / "run"))
    assert out.best is not None and out.best.speedup is not None and out.best.speedup > 1.0
    r = show_run(out.run_dir)
    assert {v.author for v in r.views} >= {"recipe:inference_mode", "recipe:compile-reduce-overhead"}
    assert r.reference_ms.get("eager") and r.reference_ms.get("compile")
    assert out.stop_reason == "the policy has nothing more to propose"


def test_a_compile_recipe_times_like_the_compile_baseline(tmp_path):
    # The same program, `torch.compile` of the reference, timed as a candidate and as the
    # baseline. Before the shapes stage reset dynamo, the candidate ran the shape-generic
    # kernels the shapes stage had made it compile: 0.216 ms against 0.130 ms on an H200.
    cfg = load_config(None, {"evaluation": {"device": "cuda", "workers_per_gpu": 1},
                             "search": {"recipes": ["compile"]}})
    out = asyncio.run(start_run(ROOT / "examples/03_softmax/problem.py", cfg, tmp_path / "run"))
    r = show_run(out.run_dir)
    [design] = [v for v in r.views if v.author == "recipe:compile"]
    assert design.status == "valid" and design.runtime_ms is not None
    compiled = r.reference_ms["compile"]
    assert compiled is not None
    assert design.runtime_ms == pytest.approx(compiled, rel=0.10), (design.runtime_ms, compiled)
    # and the chained paired ratio against the compile baseline says the same
    assert design.speedup_compared == pytest.approx(1.0, rel=0.10), design.speedup_compared
