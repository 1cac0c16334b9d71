"""A PIKE run killed with SIGKILL in the middle of a phase resumes from its database: no query
is asked twice, no design is lost, every design is evaluated once, the budget holds."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from pike_run import MAX_QUERIES, make
from test_resume_kill import count

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("policy", ["pike-b", "pike-o"])
def test_sigkill_mid_phase_then_resume(tmp_path, policy):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    proc = subprocess.Popen([sys.executable, str(HERE / "pike_run.py"), str(tmp_path), policy, "1.5"], env=env)
    db = tmp_path / "run" / "run.db"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and count(db, "designs") < 6:  # the phase's 6 queries asked
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert count(db, "designs") >= 6 and count(db, "evaluations") < 6  # killed mid-phase

    loop, store, ev = make(tmp_path, policy, 0.0)
    out = asyncio.run(loop.run())
    calls = store.agent_calls()
    assert sum(c.requests for c in calls) <= MAX_QUERIES
    designs = store.designs()
    evaluations = store.evaluations()
    assert len(evaluations) == len({e.design_id for e in evaluations}) == len(designs)  # each once
    # every slot's first query was asked once: one round-0 design per slot, one call per design
    tags = store.tags()
    first = Counter(k for t in tags.values() for k, v in t.items() if k.startswith("slot ") and v["round"] == 0)
    assert first and set(first.values()) == {1}
    code_calls = [c for c in calls if c.role in ("optimize", "mutate", "crossover")]
    # one call per first query, and one per answer that restated an earlier design (the resumed
    # script answers as the killed one did, so it restates it; each goes back with a new prompt)
    assert len(code_calls) >= len(first)
    assert len({c.prompt_hash for c in calls}) == len(calls)  # no prompt sent twice
    later = sum(1 for t in tags.values() for v in t.values() if isinstance(v, dict) and v.get("round", 0) > 0)
    assert Counter(c.role for c in calls)["fix"] <= later  # each fix's design is stored (a restated one linked)
    assert [i.status for i in store.iterations()][0] == "interrupted"
    assert out.stop_reason.startswith("max_queries") and store.run().status == "finished"
