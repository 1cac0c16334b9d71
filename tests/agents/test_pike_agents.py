"""PIKE's one-request agents: each query takes one of the phase's tickets before it is sent; a
transport retry is counted apart (no query, no ticket), so the charge equals the queries taken;
every call is recorded with its role."""

from __future__ import annotations

import asyncio

from agent_fakes import SleepRecorder, agents_cfg, runtime
from pydantic_ai.exceptions import ModelHTTPError
from test_agent_calls import flaky

from stratagem.agents.pike import PikeAgents, Tickets


def agents_with(model, recorded):
    rt = runtime({"default": model}, agents_cfg(backoff_s=1.0, max_retries=4), sleep=SleepRecorder())
    return PikeAgents(rt.recording(recorded.append), domain="pytorch")


def test_a_retry_is_no_query_and_needs_no_ticket():
    model, calls = flaky([ModelHTTPError(503, "flaky")], answer="```python\nclass ModelNew: pass\n```")
    recorded = []
    t = Tickets(1)
    w = asyncio.run(agents_with(model, recorded).write("optimize", "prompt", t))
    assert w.source == "class ModelNew: pass\n" and calls[0] == 2  # retried with the phase's last query
    assert t.taken == 1 and [(c.requests, c.retries) for c in recorded] == [(1, 1)] and recorded[0].role == "optimize"


def test_no_ticket_no_request():
    model, calls = flaky([], answer="x")
    recorded = []
    t = Tickets(0)
    a = asyncio.run(agents_with(model, recorded).ask("brainstorm", "prompt", t))
    assert a.source is None and a.error_kind == "budget" and calls[0] == 0 and recorded == []
