"""The search on a GPU (run on the GPU machine: pytest -m gpu): a short `recipes` run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
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


def _gpu_pids() -> set[int]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout
    return {int(x) for x in out.split()}


def test_the_wall_budget_stops_gpu_work_in_flight(tmp_path):
    """`--max-wall-seconds` is a deadline on the GPU too: the run ends at the budget with the
    evaluation (or the baselines) in flight stopped, and no process of it is left on the GPU."""
    before = _gpu_pids()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    budget_s = 45
    env = {**os.environ, "TMPDIR": str(tmp)}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "stratagem", "run", str(ROOT / "examples/06_fused_block/problem.py"),
                           "--device", "cuda", "--run-dir", str(tmp_path / "run"), "--json",
                           "--max-wall-seconds", str(budget_s)], env=env, capture_output=True, text=True, timeout=400)
    took = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["stop_reason"].startswith("max_wall_seconds ("), done.stdout[-2000:]
    assert took < budget_s + 30, took  # interpreter start, imports and the cleanup around the budget
    time.sleep(1)
    assert _gpu_pids() <= before, "a process of the run is still on the GPU"
    assert not list(tmp.glob("stratagem-*")), list(tmp.iterdir())
