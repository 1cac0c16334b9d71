"""A build killed mid-way leaves nothing that blocks a later evaluation (issue 23): torch's
build baton (`NAME/lock` in the slot's extension directory) outlives a killed build, and every
later build of that extension used to wait for it until the compile limit."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from stratagem.core.verdict import ValidatorResult
from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.build import builds
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

ROOT = Path(__file__).resolve().parents[2]
# What load_inline does before it builds: take the extension's baton, or wait for its holder.
WAITS_ON_ITS_BATON = '''import os

import torch
import torch.nn as nn
from torch.utils.file_baton import FileBaton

_baton = FileBaton(os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "relu_ext", "lock"))
if _baton.try_acquire():
    _baton.release()
else:
    _baton.wait()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def test_a_dead_builds_baton_is_cleared_before_the_next_load(cpu_config, monkeypatch, _isolated_cache) -> None:
    monkeypatch.setattr(domain, "run_static_checks", lambda *a, **k: ValidatorResult("static_checks", "passed"))
    cfg = cpu_config.model_copy(update={"correctness_trials": 1, "timeout_s": 30, "compile_timeout_s": 30})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    root = ex.slots[0].caches / "torch_extensions"  # the PyTorch worker's cache in the slot's folder
    (root / "relu_ext").mkdir(parents=True)
    (root / "relu_ext" / "main.o").write_bytes(b"half a build")
    (root / "relu_ext" / "lock").touch()  # what a build killed mid-way leaves
    ev = asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(ROOT / "tests/fixtures/problem_relu.py"),
                                                        candidate_design(WAITS_ON_ITS_BATON), with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    load = ev.verdict.result("load")
    assert load is not None and load.details["stale_build_locks_removed"] == ["relu_ext"]
    assert not (root / "relu_ext" / "lock").exists()


def test_a_live_claim_is_waited_for_and_a_dead_one_is_not(tmp_path) -> None:
    """The claim is an flock: held by a live process it blocks, and the kernel drops it with
    its holder however that process ends (here, SIGKILL)."""
    import signal
    import subprocess
    import sys
    import time

    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
        "from stratagem.domains.pytorch.build import builds; builds.claim(Path(sys.argv[2])); "
        "print('held', flush=True); time.sleep(600)"), str(ROOT / "src"), str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "lock").touch()  # a live build's baton: left alone while the claim is held
    waiter = subprocess.Popen([sys.executable, "-c", (
        "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
        "from stratagem.domains.pytorch.build import builds; print(builds.claim(Path(sys.argv[2])), flush=True)"),
        str(ROOT / "src"), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert waiter.poll() is None and (tmp_path / "ext" / "lock").exists()  # waiting: the holder is alive
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    out, _ = waiter.communicate(timeout=30)
    assert out.strip() == "['ext']" and not (tmp_path / "ext" / "lock").exists()
    assert builds.CLAIM_FILE == ".stratagem-builds.lock"
