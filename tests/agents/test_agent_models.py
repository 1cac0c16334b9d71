"""Model resolution from the config, and the pool concurrent agents share."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.test import TestModel

from stratagem.agents.models import (
    ModelPool,
    RoleModels,
    endpoint_model_name,
    model_settings,
    resolve_models,
)
from stratagem.config import AgentsConfig
from stratagem.errors import ConfigError


def test_four_concurrent_checkouts_over_two_endpoints_use_both() -> None:
    cfg = AgentsConfig(model="ollama:qwen3:32b",
                       endpoints=["http://gpu0:11434/v1", "http://gpu1:11434/v1"])
    pool = resolve_models(cfg)
    assert len(pool) == 2
    used: list[str] = []
    peak: list[list[int]] = []

    async def agent() -> None:
        async with pool.checkout() as model:
            used.append(model.base_url or "")
            peak.append(list(pool.busy))
            await asyncio.sleep(0.01)

    async def main() -> None:
        await asyncio.gather(*(agent() for _ in range(4)))

    asyncio.run(main())
    assert sorted(used) == ["http://gpu0:11434/v1/"] * 2 + ["http://gpu1:11434/v1/"] * 2
    assert max(max(b) for b in peak) == 2  # never three on one endpoint while one is idle
    assert pool.busy == [0, 0] and pool.served == [2, 2]


def test_sequential_checkouts_rotate() -> None:
    pool = ModelPool([TestModel(), TestModel()], labels=["a", "b"])

    async def main() -> list[int]:
        out = []
        for _ in range(4):
            async with pool.checkout() as m:
                out.append(next(i for i, x in enumerate(pool.models) if x is m))
        return out

    assert asyncio.run(main()) == [0, 1, 0, 1]


def test_endpoint_models_are_openai_compatible_with_the_configured_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "sk-test-123")
    pool = resolve_models(AgentsConfig(model="vllm:Qwen/Qwen3-32B", endpoints=["http://h:8000/v1"],
                                       api_key_env="MY_LLM_KEY"))
    [m] = pool.models
    assert isinstance(m, OpenAIChatModel) and m.model_name == "Qwen/Qwen3-32B"
    assert m.client.api_key == "sk-test-123"
    pool = resolve_models(AgentsConfig(model="qwen3:32b", endpoints=["http://h:8000/v1"]))
    assert pool.models[0].model_name == "qwen3:32b"  # an unknown prefix is part of the name
    assert pool.models[0].client.api_key == "none"


def test_resolution_of_test_and_provider_models(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(resolve_models(AgentsConfig(model="test")).models[0], TestModel)
    monkeypatch.setenv("K", "sk-x")
    pool = resolve_models(AgentsConfig(model="openai:gpt-4.1", api_key_env="K"))
    assert pool.models[0].model_name == "gpt-4.1"
    with pytest.raises(ConfigError):
        resolve_models(AgentsConfig(model=None))
    with pytest.raises(ConfigError):
        resolve_models(AgentsConfig(model="nosuchprovider:model-x"))


def test_endpoint_model_name() -> None:
    assert endpoint_model_name("ollama:qwen3:32b") == "qwen3:32b"
    assert endpoint_model_name("openai:gpt-oss-120b") == "gpt-oss-120b"
    assert endpoint_model_name("gpt-oss:120b") == "gpt-oss:120b"


def test_role_models_fall_back_to_default() -> None:
    a, b = TestModel(), TestModel()
    rm = RoleModels.of({"strategist": a, "default": b})
    assert rm.pool("strategist").models[0] is a
    assert rm.pool("implementor").models[0] is b
    only = RoleModels.of({"implementor": a})
    assert only.pool("summarizer").models[0] is a


def test_model_settings_disable_sdk_retries() -> None:
    s = model_settings(AgentsConfig(model="test", request_timeout_s=30, temperature=0.3))
    assert s == {"timeout": 30, "max_retries": 0, "temperature": 0.3}
