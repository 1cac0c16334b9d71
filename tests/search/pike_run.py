"""A PIKE run on the fake evaluator with a scripted model, as its own process, so a test can
SIGKILL it mid-phase. Usage: python pike_run.py RUN_DIR POLICY DELAY_S"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from fakes import FakeEvaluator
from pike_fakes import Script, make_pike_loop
from pydantic_ai import models

SETTINGS = {"pike-b": {"num_branches": 6, "queries_per_phase": 6, "max_fix_attempts": 3},
            "pike-o": {"parallel_evaluations": 6, "migration_interval": 2, "max_fix_attempts": 3}}
"""Phase (batch) 0 reserves 6 x (1 + 3) = 24 of the 30 queries, so its six first queries are
asked at once and the test's kill (after six designs) falls after them, not between a later
slot's answer and its stored design (the one thing a kill can still cost: docs/pike.md)."""
MAX_QUERIES = 30


def make(tmp: Path, policy: str, delay_s: float):
    script = Script(bad=lambda n: n % 3 == 0)
    return make_pike_loop(tmp, policy, script, settings=SETTINGS[policy], max_queries=MAX_QUERIES,
                          evaluator=FakeEvaluator(delay_s=delay_s))


if __name__ == "__main__":
    models.ALLOW_MODEL_REQUESTS = False
    loop, _, _ = make(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]))
    asyncio.run(loop.run())
