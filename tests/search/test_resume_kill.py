"""A run killed with SIGKILL mid-evaluation resumes from its database without losing or
duplicating designs."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from scripted_run import SCRIPT, make

HERE = Path(__file__).resolve().parent


def count(db: Path, table: str) -> int:
    try:
        with sqlite3.connect(db) as c:
            return int(c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_sigkill_mid_iteration_then_resume(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    proc = subprocess.Popen([sys.executable, str(HERE / "scripted_run.py"), str(run_dir), "1.0"], env=env)
    db = run_dir / "run.db"
    deadline = time.monotonic() + 60
    # Kill once the second design of iteration 2 is stored but not yet evaluated.
    while time.monotonic() < deadline and count(db, "designs") < 4:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert count(db, "designs") == 4 and count(db, "evaluations") == 3

    loop, store, ev = make(run_dir, 0.0)
    out = asyncio.run(loop.run())
    designs = store.designs()
    evaluations = store.evaluations()
    all_sources = {s for it in SCRIPT for s in it}
    assert len(designs) == len({d.id for d in designs})
    assert len(evaluations) == len({e.design_id for e in evaluations}) == len(designs)
    # Nothing lost: the design killed mid-evaluation was evaluated on resume (first), once.
    assert len(ev.calls) == len(set(ev.calls))
    assert {store.design_source(d.id) for d in designs} <= all_sources
    its = store.iterations()
    assert [i.status for i in its] == ["done", "interrupted", "done"]
    assert out.stop_reason.startswith("iterations")
    assert store.run().status == "finished"
