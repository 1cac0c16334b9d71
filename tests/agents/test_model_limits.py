"""Model calls that fit slow reasoning models: the per-request and preflight limits are
settings with defaults of minutes, a preflight that runs out of time says it timed out (not
that the endpoint is wrong), and transport retries are counted apart from the query budget."""

from __future__ import annotations

import asyncio

import pytest
from agent_fakes import SleepRecorder, agents_cfg, runtime, text
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.wrapper import WrapperModel

from stratagem.agents.models import RoleModels, preflight
from stratagem.agents.pike import PikeAgents, Tickets
from stratagem.config import AgentsConfig
from stratagem.errors import ModelUnreachable


class Remote(WrapperModel):
    """A scripted model the preflight asks (it skips in-process models)."""


def test_the_limits_are_settings_with_defaults_for_slow_models():
    cfg = AgentsConfig(model="test")
    assert cfg.request_timeout_s >= 600 and cfg.preflight_timeout_s >= 120
    assert AgentsConfig(model="test", preflight_timeout_s=30, request_timeout_s=1200).preflight_timeout_s == 30


def test_a_slow_preflight_answer_is_reported_as_a_timeout():
    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(30)
        return text("OK")

    models = RoleModels.of({"default": Remote(FunctionModel(slow, model_name="thinker"))})
    with pytest.raises(ModelUnreachable) as e:
        asyncio.run(preflight(models, 0.05))
    msg = str(e.value)
    assert "a timeout" in msg and "agents.preflight_timeout_s" in msg and "cannot be reached" not in msg


def test_the_provider_s_own_timeout_is_a_timeout_too():
    def timeout(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(408, "thinker", body="request timeout")  # the provider's own limit

    models = RoleModels.of({"default": Remote(FunctionModel(timeout, model_name="thinker"))})
    with pytest.raises(ModelUnreachable, match="a timeout"):
        asyncio.run(preflight(models, 5))


def test_a_patient_model_passes_the_preflight():
    async def thinks(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(0.05)
        return text("OK")

    models = RoleModels.of({"default": Remote(FunctionModel(thinks, model_name="thinker"))})
    assert asyncio.run(preflight(models, 5)) == ["thinker"]


def test_a_pike_query_retried_after_a_timeout_is_one_query():
    calls = [0]

    async def slow_once(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls[0] += 1
        if calls[0] == 1:
            await asyncio.sleep(30)
        return text("```python\nx = 1\n```")

    recorded = []
    rt = runtime({"default": FunctionModel(slow_once)}, agents_cfg(request_timeout_s=0.05, max_retries=2),
                 sleep=SleepRecorder()).recording(recorded.append)
    tickets = Tickets(1)  # one query left: the retry must not need a second
    answer = asyncio.run(PikeAgents(rt, domain="pytorch").ask("optimize", "make it fast", tickets))
    assert answer.source is not None and calls[0] == 2
    assert tickets.taken == 1
    [call] = recorded
    assert call.requests == 1 and call.retries == 1
