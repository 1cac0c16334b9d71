"""Owns running an agent once under the project's policy, with every failure returned as data.

`run_agent` checks a model out of the role's pool, wraps it so that each request has a timeout
and is retried with exponential backoff on 429, 5xx, timeouts and connection errors (the sleep is
injectable), compresses a history past `summarize_after_tokens` with the Summarizer, and on a
context-window overflow summarizes and retries once. Malformed answers are retried by
pydantic-ai itself (`output_retries`). The result is a `CallOutcome`: the output or None, the
conversation to continue from, and an `AgentCall` with tokens, requests (the queries the budget
counts: answers, and a request lost after its retries; transport retries are counted apart, in
`retries`), cost, latency and the whole message history as JSON. Only cancellation propagates.

The run's budgets are limits: each request asks the call's meter (`runtime.meter`, the Session's)
before it is sent, and each answer's tokens and cost are counted as it arrives; a request the
budget refuses ends the run as data (error kind `budget`), and a turn's request limit is capped at
the queries left when it starts.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Generic, TypeVar

from genai_prices import Usage, calc_price
from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelTimeoutError,
    ModelUnavailableError,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits

from stratagem.agents import summarizer
from stratagem.agents.models import RoleModels, model_settings
from stratagem.agents.writers import WriterRoutes
from stratagem.config import AgentsConfig
from stratagem.context import render
from stratagem.core.search import AgentCall, Meter

OutputT = TypeVar("OutputT")
SleepFn = Callable[[float], Awaitable[None]]

RETRYABLE = frozenset({"rate_limit", "server", "timeout", "connection"})
"""Error kinds a request is retried on (with backoff)."""

FATAL = frozenset({"auth", "not_found", "quota"})
"""Error kinds no retry or later iteration can fix: the model is unusable as configured."""

MAX_RETRY_AFTER_S = 120.0
"""A provider's `Retry-After` is honoured up to this many seconds."""

_OVERFLOW_HINTS = ("context length", "context window", "maximum context", "too many tokens",
                   "context_length_exceeded", "prompt is too long")


@dataclass(frozen=True)
class AgentRuntime:
    """What every agent run needs: config, models, and the injectable clock, sleep and recorder."""

    cfg: AgentsConfig
    models: RoleModels
    sleep: SleepFn = asyncio.sleep
    clock: Callable[[], float] = time.monotonic
    record: Callable[[AgentCall], None] | None = None
    """Called with every AgentCall made (summarizer runs included)."""
    writers: WriterRoutes | None = None
    """The writing roles another backend takes over from the models (`agents/writers.py`:
    a coding-agent command, a script); None: every role writes with its model."""
    meter: Callable[[], Meter] | None = None
    """A new agent call's meter (`Session.meter`): every request asks it first; None: no budget."""

    def recording(self, record: Callable[[AgentCall], None] | None,
                  meter: Callable[[], Meter] | None = None) -> AgentRuntime:
        return replace(self, record=record, meter=meter)


@dataclass(frozen=True)
class CallOutcome(Generic[OutputT]):
    """One agent run: its output (None on failure), the conversation, and its accounting."""

    output: OutputT | None
    messages: list[ModelMessage]
    """The history to continue from: the whole conversation on success, the (possibly
    summarized) input history on failure."""
    call: AgentCall
    error_kind: str | None = None
    """None on success; else `rate_limit`, `server`, `timeout`, `connection`, `context_window`,
    `output`, `usage_limit`, `auth`, `not_found`, `quota`, `rejected`, `api` or `other`."""
    summarized: bool = False

    @property
    def ok(self) -> bool:
        return self.call.ok

    @property
    def error(self) -> str | None:
        return self.call.error

    @property
    def total_tokens(self) -> int:
        """Reported tokens (a model's are always reported; an unknown count adds 0)."""
        return (self.call.input_tokens or 0) + (self.call.output_tokens or 0)


class BudgetSpent(Exception):
    """A request the run's budget refused (`Meter.admit`): the agent's run ends there, as data."""


_KINDS: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
    ((BudgetSpent,), "budget"),
    ((ModelContextWindowExceededError,), "context_window"),
    ((UsageLimitExceeded,), "usage_limit"),
    ((ModelAuthenticationError,), "auth"),
    ((ModelNotFoundError,), "not_found"),
    ((ModelQuotaExceededError,), "quota"),
    ((ModelRateLimitError,), "rate_limit"),
    ((ModelTimeoutError, ModelRequestTimeout, TimeoutError), "timeout"),
    ((ModelConnectionError,), "connection"),
    ((ModelServerError, ModelUnavailableError), "server"),
    ((ModelHTTPError,), "http"),
    ((UnexpectedModelBehavior,), "output"),
    ((ModelAPIError,), "api"),
)
"""Exception types to error kinds, the first match wins; `http` is read from the status."""


def classify(e: BaseException) -> str:
    """The error kind of an exception raised by an agent run."""
    for types, kind in _KINDS:
        if isinstance(e, types):
            return _http_kind(e) if kind == "http" and isinstance(e, ModelHTTPError) else kind
    return "other"


def _http_kind(e: ModelHTTPError) -> str:
    code = e.status_code
    if code == 429:
        return "rate_limit"
    if code == 408:
        return "timeout"
    if code >= 500:
        return "server"
    if code in (401, 403):
        return "auth"
    if code == 404:
        return "not_found"
    text = f"{e.message} {e.body}".lower()
    if code in (400, 413) and any(h in text for h in _OVERFLOW_HINTS):
        return "context_window"
    return "rejected"


@dataclass
class RetryStats:
    """Transport retries of one agent run."""

    retries: int = 0
    """Requests sent again after a timeout, 429, 5xx or connection error: counted apart, never
    as queries."""
    lost: int = 0
    """Requests that brought no answer after their retries (each still one query)."""
    sleeps_s: list[float] = field(default_factory=list)


class RetryingModel(WrapperModel):
    """A model whose every request is admitted by the run's budget first (`meter`), has a
    timeout and is retried with exponential backoff."""

    def __init__(
        self, wrapped: Model, *, cfg: AgentsConfig, sleep: SleepFn, stats: RetryStats, meter: Meter | None = None,
    ) -> None:
        super().__init__(wrapped)
        self._cfg = cfg
        self._sleep = sleep
        self.stats = stats
        self._meter = meter

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        if self._meter is not None and (spent := self._meter.admit()) is not None:
            raise BudgetSpent(f"the run's budget is spent: {spent}")
        attempt = 0
        while True:
            try:
                async with asyncio.timeout(self._cfg.request_timeout_s):
                    response = await self.wrapped.request(
                        messages, model_settings, model_request_parameters
                    )
                if self._meter is not None:
                    u = response.usage
                    self._meter.answered(u.input_tokens + u.output_tokens, cost_usd(
                        self._cfg, self.model_name, u.input_tokens, u.output_tokens, provider=self.system))
                return response
            except TimeoutError as e:
                err: Exception = ModelTimeoutError(
                    self.model_name,
                    f"no response within {self._cfg.request_timeout_s:g} s",
                )
                err.__cause__ = e
            except Exception as e:
                if classify(e) not in RETRYABLE:
                    raise
                err = e
            if attempt >= self._cfg.max_retries:
                self.stats.lost += 1
                raise err
            delay = self._cfg.backoff_s * (2**attempt)
            after = getattr(err, "retry_after", None)
            if after:
                delay = max(delay, min(float(after), MAX_RETRY_AFTER_S))
            self.stats.retries += 1
            self.stats.sleeps_s.append(delay)
            await self._sleep(delay)
            attempt += 1


def is_retry(part: object) -> bool:
    """Whether a message part asks the model to try again (bad output, a check or tool refused)."""
    if isinstance(part, RetryFeedbackPart | RetryPromptPart):
        return True
    return isinstance(part, ToolReturnPart) and getattr(part, "outcome", None) == "retried"


def prompt_hash(instructions: str, prompt: str) -> str:
    """sha256 of the instructions and the user prompt sent."""
    return hashlib.sha256(f"{instructions}\n\n{prompt}".encode()).hexdigest()


def cost_usd(
    cfg: AgentsConfig,
    model_name: str,
    input_tokens: int,
    output_tokens: int,
    reported: Decimal | float | None = None,
    *,
    provider: str | None = None,
) -> float | None:
    """Cost of a run: a configured price wins, then the provider's (or pydantic-ai's) reported
    cost, then genai-prices' table (not for self-hosted endpoints); None when unknown."""
    price = cfg.prices.get(model_name) or (cfg.prices.get(cfg.model) if cfg.model else None)
    if price is not None:
        return (input_tokens * price.input_usd_per_mtok
                + output_tokens * price.output_usd_per_mtok) / 1e6
    if reported is not None:
        return float(reported)
    if cfg.endpoints or provider in (None, "test", "function"):
        return None
    try:
        calc = calc_price(Usage(input_tokens=input_tokens, output_tokens=output_tokens),
                          model_ref=model_name, provider_id=provider)
    except Exception:  # unknown model or provider: the price is unknown, not an error
        return None
    return float(calc.total_price)


def history_tokens(history: Sequence[ModelMessage]) -> int:
    """Approximate size of a conversation in tokens: the last response's reported context
    (input + output) plus what came after it, else about 4 characters per token."""
    last = max((i for i, m in enumerate(history) if isinstance(m, ModelResponse)), default=None)
    if last is not None:
        u = history[last].usage  # type: ignore[union-attr]
        if u.input_tokens:
            after = history[last + 1:]
            return u.input_tokens + u.output_tokens + _chars(after) // 4
    return _chars(history) // 4


def _chars(messages: Sequence[ModelMessage]) -> int:
    return len(ModelMessagesTypeAdapter.dump_json(list(messages))) if messages else 0


def _new_messages(
    history: Sequence[ModelMessage], captured: Sequence[ModelMessage]
) -> Sequence[ModelMessage]:
    """The messages a run added to `history`: everything after its last old response (a run may
    rewrite the history's trailing request, merging its prompt into it, so identity won't do)."""
    old = sum(isinstance(m, ModelResponse) for m in history)
    if old == 0:
        return captured
    seen = 0
    for i, m in enumerate(captured):
        if isinstance(m, ModelResponse):
            seen += 1
            if seen == old:
                return captured[i + 1:]
    return []


def _instructions_sent(messages: Sequence[ModelMessage]) -> str:
    for m in reversed(messages):
        if isinstance(m, ModelRequest) and m.instructions:
            return m.instructions
    return ""


def _new_usage(new: Sequence[ModelMessage]) -> tuple[int, int, int, Decimal | None]:
    """(input, output, responses, cost) summed over the responses of a failed run."""
    inp = out = n = 0
    cost: Decimal | None = None
    for m in new:
        if isinstance(m, ModelResponse):
            inp += m.usage.input_tokens
            out += m.usage.output_tokens
            n += 1
            if m.usage.cost is not None:
                cost = (cost or Decimal(0)) + Decimal(str(m.usage.cost))
    return inp, out, n, cost


async def _run_once(
    agent: Agent[Any, Any],
    prompt: str,
    *,
    role: str,
    runtime: AgentRuntime,
    model_key: str,
    deps: Any,
    history: list[ModelMessage],
    usage_limits: UsageLimits | None,
) -> CallOutcome[Any]:
    """One run of `agent`, its requests admitted by a meter of its own, recorded as it ends."""
    cfg = runtime.cfg
    stats = RetryStats()
    meter = runtime.meter() if runtime.meter is not None else None
    limits, cap = _capped(usage_limits, meter)
    try:
        async with runtime.models.pool(model_key).checkout() as model:
            wrapped = RetryingModel(model, cfg=cfg, sleep=runtime.sleep, stats=stats, meter=meter)
            start = runtime.clock()
            output: Any = None
            error: BaseException | None = None
            with capture_run_messages() as captured:
                try:
                    result = await agent.run(
                        prompt, deps=deps, message_history=history or None, model=wrapped,
                        model_settings=model_settings(cfg), usage_limits=limits,
                    )
                    output = result.output
                except Exception as e:  # every failure of a run becomes data
                    error = e
            latency = runtime.clock() - start
    except BaseException:
        if meter is not None:
            meter.close()
        raise
    new = _new_messages(history, captured)
    retry_prompts = sum(is_retry(p) for m in new for p in m.parts)
    if error is None:
        usage = result.usage
        inp, out, responses, reported = (usage.input_tokens, usage.output_tokens, usage.requests,
                                         usage.cost)
        messages = result.all_messages()
    else:
        inp, out, responses, reported = _new_usage(new)
        messages = history
    kind = classify(error) if error is not None else None
    if kind == "usage_limit" and cap is not None and responses >= cap:
        kind = "budget"  # the request limit was the queries the run had left
    call = AgentCall(
        role=role,
        model=model.model_name,
        prompt_hash=prompt_hash(_instructions_sent(captured), prompt),
        input_tokens=inp,
        output_tokens=out,
        requests=responses + stats.lost,  # queries: transport retries are counted apart
        cost_usd=cost_usd(cfg, model.model_name, inp, out, reported, provider=model.system),
        latency_s=latency,
        retries=stats.retries + retry_prompts,
        ok=error is None,
        error=None if error is None else f"{kind}: {type(error).__name__}: {error}",
        messages_json=ModelMessagesTypeAdapter.dump_json(list(captured)).decode(),
    )
    if meter is not None:
        meter.close(call.requests)
    if not (kind == "budget" and call.requests == 0):  # a call the budget refused at once asked nothing
        _record(runtime, call)  # at once after `close`: the call's spend is counted throughout
    return CallOutcome(output=output, messages=list(messages), call=call, error_kind=kind)


def _capped(limits: UsageLimits | None, meter: Meter | None) -> tuple[UsageLimits | None, int | None]:
    """The run's usage limits with its request limit capped at the queries left to it (at least
    one: a request the budget refuses says so itself), and that cap when it binds."""
    left = meter.queries_left() if meter is not None else None
    if left is None:
        return limits, None
    base = limits if limits is not None else UsageLimits()
    cap = max(1, left)
    if base.request_limit is not None and base.request_limit <= cap:
        return limits, None
    return replace(base, request_limit=cap), cap


async def summarize_history(
    history: Sequence[ModelMessage], runtime: AgentRuntime
) -> tuple[list[ModelMessage], bool]:
    """Compress a history with the Summarizer; (history unchanged, False) when it cannot."""
    head, middle, tail = summarizer.split_history(history)
    if head is None or not middle:
        return list(history), False
    max_chars = runtime.cfg.summarize_after_tokens * 4 // 2
    prompt = render.render_summarizer(summarizer.transcript(middle, max_chars))
    outcome = await _run_once(
        summarizer.build_summarizer(), prompt, role="summarizer", runtime=runtime,
        model_key="summarizer", deps=None, history=[], usage_limits=None,
    )
    if not outcome.ok or not outcome.output:
        return list(history), False
    return summarizer.rebuild(head, str(outcome.output), tail), True


def _record(runtime: AgentRuntime, call: AgentCall) -> None:
    if runtime.record is not None:
        runtime.record(call)


async def run_agent(
    agent: Agent[Any, OutputT],
    prompt: str,
    *,
    role: str,
    runtime: AgentRuntime,
    deps: Any = None,
    history: Sequence[ModelMessage] = (),
    usage_limits: UsageLimits | None = None,
    model_key: str | None = None,
) -> CallOutcome[OutputT]:
    """Run `agent` once on `prompt` (continuing `history`) under the project's policy.

    Every call made (the run, and any Summarizer run) is passed to `runtime.record` as it ends. Never raises
    for an LLM or tool failure: the outcome says what went wrong (`error_kind`, `call.error`).

    Args:
        role: recorded as `AgentCall.role` (`strategist`, `analyst`, `implementor`, ...).
        model_key: the pool to draw from; default: the role.
    """
    key = model_key or role
    msgs = list(history)
    summarized = False
    if msgs and history_tokens(msgs) > runtime.cfg.summarize_after_tokens:
        msgs, summarized = await summarize_history(msgs, runtime)
    kw: dict[str, Any] = dict(role=role, runtime=runtime, model_key=key, deps=deps,
                              usage_limits=usage_limits)
    outcome = await _run_once(agent, prompt, history=msgs, **kw)
    if outcome.error_kind == "context_window" and msgs:
        shorter, ok = await summarize_history(msgs, runtime)
        if ok:
            summarized = True
            outcome = await _run_once(agent, prompt, history=shorter, **kw)
            if not outcome.ok:  # a failed retry continues from the summary, not the overflow
                outcome = replace(outcome, messages=shorter)
        else:
            return replace(outcome, summarized=summarized)
    return replace(outcome, summarized=summarized)
