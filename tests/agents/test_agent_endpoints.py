"""Endpoint pools through the real OpenAI client against local stub servers (no LLM involved).

Model requests are disabled suite-wide; these tests re-enable them for their own duration only,
since the stubs are local servers.
"""

from __future__ import annotations

import asyncio
import time

import pydantic_ai.models
import pytest
from agent_fakes import SleepRecorder, agents_cfg
from pydantic_ai import Agent
from stub_openai import HTTPError, StubOpenAIServer, Text

from stratagem.agents.calls import AgentRuntime, run_agent
from stratagem.agents.models import RoleModels, resolve_models


@pytest.fixture(autouse=True)
def _allow_model_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pydantic_ai.models, "ALLOW_MODEL_REQUESTS", True)


def test_a_429_is_retried_by_us_not_the_sdk_honouring_retry_after() -> None:
    script = [HTTPError(429, headers={"Retry-After": "1"}), Text("ok after 429")]
    with StubOpenAIServer(script) as stub:
        cfg = agents_cfg(model="ollama:stub-model", endpoints=[stub.base_url], backoff_s=0.25,
                         request_timeout_s=10)
        sleeper = SleepRecorder()
        rt = AgentRuntime(cfg=cfg, models=RoleModels(default=resolve_models(cfg)), sleep=sleeper)
        out = asyncio.run(asyncio.wait_for(
            run_agent(Agent(None, instructions="Be brief."), "hi", role="analyst", runtime=rt),
            timeout=10))
        assert out.ok and out.output == "ok after 429"
        assert len(stub.requests) == 2 and stub.requests[0]["model"] == "stub-model"
        assert [h["x-stainless-retry-count"] for h in stub.request_headers] == ["0", "0"]
    assert sleeper.sleeps == [1.0]  # Retry-After (1 s) beats the 0.25 s backoff
    assert out.call.retries == 1 and out.call.requests == 1  # the retry is no query
    assert out.call.input_tokens == 10 and out.call.output_tokens == 5
    assert out.call.cost_usd is None  # a self-hosted endpoint has no price


def test_concurrent_agents_spread_over_endpoints() -> None:
    with StubOpenAIServer([Text("a"), Text("b")]) as s1, \
            StubOpenAIServer([Text("c"), Text("d")]) as s2:
        cfg = agents_cfg(model="stub-model", endpoints=[s1.base_url, s2.base_url])
        rt = AgentRuntime(cfg=cfg, models=RoleModels(default=resolve_models(cfg)))

        async def main() -> list[str]:
            runs = [run_agent(Agent(None), f"q{i}", role="implementor", runtime=rt)
                    for i in range(4)]
            return [str(o.output) for o in await asyncio.gather(*runs)]

        outputs = asyncio.run(asyncio.wait_for(main(), timeout=10))
        assert sorted(outputs) == ["a", "b", "c", "d"]
        assert len(s1.requests) == 2 and len(s2.requests) == 2


def test_a_slow_endpoint_times_out_and_the_request_is_retried() -> None:
    def slow(request: dict) -> Text:
        time.sleep(1.0)
        return Text("too late")

    with StubOpenAIServer([slow, Text("in time")]) as stub:
        cfg = agents_cfg(model="stub-model", endpoints=[stub.base_url], request_timeout_s=0.2,
                         backoff_s=0.0)
        rt = AgentRuntime(cfg=cfg, models=RoleModels(default=resolve_models(cfg)),
                          sleep=SleepRecorder())
        start = time.monotonic()
        out = asyncio.run(asyncio.wait_for(
            run_agent(Agent(None), "hi", role="analyst", runtime=rt), timeout=10))
        assert time.monotonic() - start < 1.0
        assert out.ok and out.output == "in time" and out.call.retries == 1
