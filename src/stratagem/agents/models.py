"""Owns model resolution: `AgentsConfig` -> pydantic-ai models, and the pool agents share.

- `test`: pydantic-ai's `TestModel` (offline, no network; `offline.py` scripts it per role).
- `provider:name` (`openai:gpt-4.1`, `anthropic:claude-sonnet-4-5`, ...): pydantic-ai's own
  resolution; with `api_key_env` the key is read through `config.secret` and handed over.
- `endpoints` (OpenAI-compatible base URLs: vLLM, Ollama, llama.cpp ...): one `OpenAIChatModel`
  per URL serving `model` (a leading `openai:`/`ollama:`/`vllm:` is dropped from the name).

Several models form a `ModelPool`: `checkout()` hands out the least busy one, so concurrent
agents spread across endpoints. Construction opens no connection.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model, infer_model
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.providers import Provider, infer_provider, infer_provider_class
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from stratagem.config import AgentsConfig, secret
from stratagem.errors import ConfigError

ENDPOINT_PREFIXES = frozenset({"openai", "ollama", "vllm", "local"})
"""Provider prefixes dropped from `model` when it is served by `endpoints`."""

ROLES = ("strategist", "analyst", "review", "implementor", "summarizer")
"""The keys a `RoleModels` knows (the review is an Analyst run with its own output type)."""


class ModelPool:
    """Models serving the same role, handed out least-busy first.

    `checkout()` picks and claims a model without awaiting in between, so concurrent tasks of
    one event loop never race; ties go to the model used least recently.
    """

    def __init__(self, models: Sequence[Model], *, labels: Sequence[str] | None = None) -> None:
        if not models:
            raise ValueError("a ModelPool needs at least one model")
        self.models: tuple[Model, ...] = tuple(models)
        self.labels: tuple[str, ...] = tuple(labels) if labels else tuple(
            m.model_name for m in models
        )
        self.busy: list[int] = [0] * len(self.models)
        """Checkouts in progress, per model."""
        self.served: list[int] = [0] * len(self.models)
        """Checkouts so far, per model."""
        self._tick = 0
        self._last: list[int] = [-1] * len(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def _pick(self) -> int:
        return min(range(len(self.models)), key=lambda i: (self.busy[i], self._last[i], i))

    @asynccontextmanager
    async def checkout(self) -> AsyncIterator[Model]:
        """Hold the least busy model for the duration of the block."""
        i = self._pick()
        self.busy[i] += 1
        self.served[i] += 1
        self._tick += 1
        self._last[i] = self._tick
        try:
            yield self.models[i]
        finally:
            self.busy[i] -= 1


@dataclass(frozen=True)
class RoleModels:
    """Which pool serves which role; roles without their own pool use `default`."""

    default: ModelPool
    by_role: Mapping[str, ModelPool] = field(default_factory=dict)

    def pool(self, role: str) -> ModelPool:
        return self.by_role.get(role, self.default)

    @classmethod
    def of(cls, models: Mapping[str, Model], fallback: ModelPool | None = None) -> RoleModels:
        """Single models per role (tests inject these); `default` (or the fallback) fills gaps."""
        pools = {k: ModelPool([m]) for k, m in models.items() if k != "default"}
        if "default" in models:
            default = ModelPool([models["default"]])
        elif fallback is not None:
            default = fallback
        elif pools:
            default = pools.get("implementor") or next(iter(pools.values()))
        else:
            raise ConfigError("no model: set agents.model (or inject models)")
        return cls(default=default, by_role=pools)


def choose_models(
    cfg: AgentsConfig, offline: Callable[[], RoleModels], injected: Mapping[str, object] | None = None
) -> RoleModels:
    """Which models serve which role: injected ones (tests; the configured model fills the roles
    they leave out), the policy's scripted `offline` models for `--model test`, or the
    configured model / endpoints for every role.

    Raises:
        ConfigError: no model configured and none injected, or the model cannot be built.
    """
    if injected:
        fallback: ModelPool | None = None
        if "default" not in injected and cfg.model and cfg.model != "test":
            fallback = resolve_models(cfg)
        return RoleModels.of(injected, fallback=fallback)  # type: ignore[arg-type]
    if cfg.model == "test":
        return offline()
    return RoleModels(default=resolve_models(cfg))


def quiet_library() -> None:
    """No pydantic-ai banner in stratagem's terminal (it advertises the library's own tools
    to a user of the CLI); stratagem's live view says what runs."""
    import pydantic_ai

    pydantic_ai.BANNER_ENABLED = False


PREFLIGHT_PROMPT = "Reply with the single word OK."


async def preflight(models: RoleModels, timeout_s: float) -> list[str]:
    """One tiny request to every distinct remote model the roles use, before a run does any
    work: a model or endpoint that cannot answer stops the run here, with the provider's own
    error. Models that answer in-process (`TestModel`, `FunctionModel`) are not asked.
    Returns the labels of the models asked.

    Raises:
        ModelUnreachable: a model failed or did not answer within `timeout_s`.
    """
    import asyncio

    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from stratagem.errors import ModelUnreachable

    seen: dict[int, tuple[Model, str]] = {}
    for pool in (models.default, *models.by_role.values()):
        for m, label in zip(pool.models, pool.labels, strict=True):
            if not isinstance(m, TestModel | FunctionModel):
                seen.setdefault(id(m), (m, label))

    async def ask(m: Model, label: str) -> None:
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: 3.11's can lose a Ctrl-C
                await Agent(m, output_type=str, retries=0).run(PREFLIGHT_PROMPT, model_settings=ModelSettings(max_tokens=16))
        except TimeoutError:
            raise ModelUnreachable(timed_out(label, timeout_s)) from None
        except Exception as e:  # noqa: BLE001 - the provider's own error is the message
            if is_timeout(e):
                raise ModelUnreachable(timed_out(label, timeout_s)) from e
            detail = error_chain(e)
            raise ModelUnreachable(f"model {label} cannot be reached: {detail}; check --model, --endpoint "
                                   "and the API key variable (agents.api_key_env)") from e

    await asyncio.gather(*(ask(m, label) for m, label in seen.values()))
    return [label for _m, label in seen.values()]


def timed_out(label: str, timeout_s: float) -> str:
    """What a preflight request that ran out of time says: a timeout, not a wrong endpoint."""
    return (f"model {label} did not answer a one-line request within {timeout_s:g} s (a timeout: a slow "
            "reasoning model may need longer; raise agents.preflight_timeout_s, or check that the server is up)")


def is_timeout(e: BaseException) -> bool:
    """The provider's own timeout (its SDK's or httpx's), anywhere in the exception's chain."""
    from stratagem.agents.calls import classify

    seen: BaseException | None = e
    while seen is not None:
        if classify(seen) == "timeout" or "Timeout" in type(seen).__name__:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_LIBRARY_ADVICE = re.compile(r"\s*To try Pydantic AI without an API key.*$", re.S)
_PROVIDER_ARG = re.compile(r" or pass it via `\w+Provider\(api_key=\.\.\.\)`")


def cli_advice(message: str) -> str:
    """A provider error rewritten for the command line: pydantic-ai's library advice
    (`Agent('test')`, `OpenAIProvider(api_key=...)`) replaced by the CLI's own options."""
    text = _PROVIDER_ARG.sub(" (or name another variable with agents.api_key_env)", message)
    text = _LIBRARY_ADVICE.sub("", text).rstrip()
    return text + (" To try stratagem without an API key: --model test (scripted offline agents), or no --model "
                   "(the recipes policy).")


def error_chain(e: BaseException, depth: int = 4) -> str:
    """`Type: message` of an exception and its causes, down to the root (`Connection error.`
    says little; the refused connection under it says what is wrong)."""
    parts: list[str] = []
    cur: BaseException | None = e
    while cur is not None and len(parts) < depth:
        text = f"{type(cur).__name__}: {cur}".strip()
        if text not in parts:
            parts.append(text)
        cur = cur.__cause__ or cur.__context__
    return " <- ".join(parts)


def endpoint_model_name(model: str) -> str:
    """The model name to send to an OpenAI-compatible endpoint (`ollama:qwen3:32b` -> `qwen3:32b`)."""
    prefix, sep, rest = model.partition(":")
    return rest if sep and prefix in ENDPOINT_PREFIXES and rest else model


def resolve_models(cfg: AgentsConfig) -> ModelPool:
    """Build the pool the config names (no network traffic).

    Raises:
        ConfigError: no model configured, or pydantic-ai cannot build it (unknown provider,
            missing API key).
    """
    if not cfg.model:
        raise ConfigError("the auto policy needs a model: set agents.model (or --model)")
    if cfg.model == "test":
        return ModelPool([TestModel(call_tools=[])], labels=["test"])
    endpoints = cfg.resolved_endpoints()
    if endpoints:
        key = secret(cfg.api_key_env) or "none"
        name = endpoint_model_name(cfg.model)
        models: list[Model] = [
            OpenAIChatModel(name, provider=OpenAIProvider(base_url=url, api_key=key))
            for url in endpoints
        ]
        return ModelPool(models, labels=[f"{name}@{url}" for url in endpoints])
    try:
        model = infer_model(cfg.model, provider_factory=_provider_factory(cfg))
    except (UserError, ValueError, ImportError) as e:
        raise ConfigError(f"cannot use model {cfg.model!r} (--model): {cli_advice(str(e))}") from e
    return ModelPool([model], labels=[cfg.model])


def _provider_factory(cfg: AgentsConfig) -> Any:
    key = secret(cfg.api_key_env)
    if key is None:
        return infer_provider

    def factory(name: str) -> Provider[Any]:
        cls = infer_provider_class(name)
        try:
            return cls(api_key=key)  # type: ignore[call-arg]
        except TypeError:  # a provider without an api_key argument
            return infer_provider(name)

    return factory


def model_settings(cfg: AgentsConfig) -> ModelSettings:
    """Per-request settings: the provider's own timeout, no SDK retries (ours run instead)."""
    settings: ModelSettings = {"timeout": cfg.request_timeout_s, "max_retries": 0}
    if cfg.temperature is not None:
        settings["temperature"] = cfg.temperature
    return settings

