"""A command problem evaluated through the queue executor (issue 25, item 4): the request goes
through the folder queue to a `stratagem.evaluation.queue_worker` process, which runs the
command domain's worker in its sandbox and answers with the same verdict the local executor
gives (per-case timing and a harness baseline included)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from test_command_cases import FAST, make

from stratagem.config import load_config
from stratagem.core.design import Design
from stratagem.domains import load_problem
from stratagem.evaluation.api import make_evaluator

SRC = str(Path(__file__).resolve().parents[3] / "src")


def test_a_command_problem_through_the_queue(tmp_path: Path) -> None:
    q = tmp_path / "queue"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, *sys.path]),
           "STRATAGEM_CACHE_DIR": str(tmp_path / "cache")}
    w = subprocess.Popen([sys.executable, "-m", "stratagem.evaluation.queue_worker", "--queue", str(q), "--device",
                          "cpu", "--poll-s", "0.1", "--max-seconds", "240"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    cfg = load_config(None, {"evaluation": {"device": "cpu", "executor": "queue", "queue_dir": str(q),
                                            "queue_poll_s": 0.1}}).evaluation
    try:
        ev = asyncio.run(make_evaluator(cfg).evaluate(load_problem(make(tmp_path / "squares")),
                                                      Design(files={"kernel.c": FAST}), with_baseline=False))
    finally:
        w.kill()
        _, err = w.communicate()
    assert ev.verdict.status == "valid", (ev.verdict.report(), err[-2000:])
    timing = ev.verdict.result("timing").details
    assert set(timing["cases"]) == {"20000", "200000"} and "fast" in timing["baselines"]
    assert ev.environment.get("physical_device") == "cpu" and ev.environment.get("host")
    assert list((q / "consumed").iterdir()) and not list((q / "requests").iterdir())
