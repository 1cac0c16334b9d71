"""run_agent: retries with backoff, timeouts, context overflow, usage and cost, failures as data."""

from __future__ import annotations

import asyncio
import json
import time

from agent_fakes import SleepRecorder, agents_cfg, runtime, text, user_prompts
from pydantic_ai import Agent
from pydantic_ai.exceptions import (
    ModelAuthenticationError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelRateLimitError,
)
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stratagem.agents.calls import classify, cost_usd, history_tokens, run_agent
from stratagem.config import Price


def plain_agent() -> Agent[None, str]:
    return Agent(None, output_type=str, instructions="Answer briefly.")


def flaky(errors: list[Exception], answer: str = "done") -> tuple[FunctionModel, list[int]]:
    calls = [0]

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls[0] += 1
        if errors:
            raise errors.pop(0)
        return text(answer)

    return FunctionModel(fn, model_name="flaky"), calls


def test_429_twice_then_answer_is_retried_with_backoff() -> None:
    errs: list[Exception] = [
        ModelHTTPError.for_category(ModelRateLimitError, status_code=429, model_name="flaky"),
        ModelHTTPError(429, "flaky", body={"error": "slow down"}),
    ]
    model, calls = flaky(errs)
    sleeper = SleepRecorder()
    rt = runtime({"default": model}, agents_cfg(backoff_s=2.0, max_retries=4), sleep=sleeper)
    recorded = []
    rt = rt.recording(recorded.append)
    start = time.monotonic()
    out = asyncio.run(run_agent(plain_agent(), "hi", role="strategist", runtime=rt))
    assert time.monotonic() - start < 2  # the backoff was recorded, not slept
    assert out.ok and out.output == "done"
    assert calls[0] == 3
    assert sleeper.sleeps == [2.0, 4.0]
    assert out.call.retries == 2
    assert out.call.requests == 1  # one query: the two retries are counted apart
    assert out.call.role == "strategist" and out.call.model == "flaky"
    assert recorded == [out.call]


def test_retries_give_up_after_max_retries_as_data() -> None:
    errs = [ModelHTTPError(503, "flaky") for _ in range(5)]
    model, calls = flaky(errs)
    sleeper = SleepRecorder()
    rt = runtime({"default": model}, agents_cfg(backoff_s=0.5, max_retries=2), sleep=sleeper)
    out = asyncio.run(run_agent(plain_agent(), "hi", role="analyst", runtime=rt))
    assert not out.ok and out.output is None
    assert out.error_kind == "server"
    assert calls[0] == 3 and sleeper.sleeps == [0.5, 1.0]
    assert "503" in (out.call.error or "")
    assert out.call.retries == 2 and out.call.requests == 1  # the lost request is one query


def test_non_retryable_errors_are_not_retried() -> None:
    model, calls = flaky([ModelHTTPError.for_category(
        ModelAuthenticationError, status_code=401, model_name="flaky")])
    sleeper = SleepRecorder()
    rt = runtime({"default": model}, sleep=sleeper)
    out = asyncio.run(run_agent(plain_agent(), "hi", role="analyst", runtime=rt))
    assert not out.ok and out.error_kind == "auth"
    assert calls[0] == 1 and sleeper.sleeps == []


def test_a_request_that_hangs_times_out_and_is_retried() -> None:
    calls = [0]

    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls[0] += 1
        if calls[0] == 1:
            await asyncio.sleep(30)
        return text("finally")

    sleeper = SleepRecorder()
    cfg = agents_cfg(request_timeout_s=0.05, backoff_s=1.0, max_retries=2)
    rt = runtime({"default": FunctionModel(slow)}, cfg, sleep=sleeper)
    start = time.monotonic()
    out = asyncio.run(run_agent(plain_agent(), "hi", role="analyst", runtime=rt))
    assert time.monotonic() - start < 5
    assert out.ok and out.output == "finally"
    assert calls[0] == 2 and sleeper.sleeps == [1.0]


def test_a_request_that_always_hangs_fails_as_timeout() -> None:
    async def hang(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(30)
        return text("never")

    cfg = agents_cfg(request_timeout_s=0.05, max_retries=1)
    rt = runtime({"default": FunctionModel(hang)}, cfg, sleep=SleepRecorder())
    out = asyncio.run(run_agent(plain_agent(), "hi", role="analyst", runtime=rt))
    assert not out.ok and out.error_kind == "timeout"
    assert out.call.retries == 1


def _conversation(turns: int, size: int = 200) -> list[ModelMessage]:
    msgs: list[ModelMessage] = []
    for i in range(turns):
        msgs.append(ModelRequest(parts=[UserPromptPart(f"question {i} " + "x" * size)]))
        msgs.append(ModelResponse(parts=[TextPart(f"answer {i} " + "y" * size)]))
    return msgs


def test_context_overflow_summarizes_and_retries_once() -> None:
    seen: list[list[str]] = []

    def main(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts = user_prompts(messages)
        seen.append(prompts)
        if len(seen) == 1:
            raise ModelHTTPError.for_category(
                ModelContextWindowExceededError, status_code=400, model_name="m",
                body={"error": "context_length_exceeded"})
        return text("answered after the summary")

    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert "question 1" in user_prompts(messages)[-1]  # the transcript of the middle
        return text("SUMMARY: questions 1-3 were answered")

    rt = runtime({"default": FunctionModel(main), "summarizer": FunctionModel(summarize)})
    recorded = []
    rt = rt.recording(recorded.append)
    history = _conversation(4)
    out = asyncio.run(run_agent(plain_agent(), "next question", role="implementor",
                                runtime=rt, history=history))
    assert out.ok and out.output == "answered after the summary"
    assert out.summarized
    assert [c.role for c in recorded] == ["implementor", "summarizer", "implementor"]
    assert not recorded[0].ok and recorded[0].error.startswith("context_window")
    retry_prompts = seen[1]
    assert retry_prompts[0].startswith("question 0")  # the head is kept
    assert any("SUMMARY: questions 1-3" in p for p in retry_prompts)
    assert retry_prompts[-2].startswith("question 3")  # the latest exchange is kept
    assert retry_prompts[-1] == "next question"
    assert not any(p.startswith("question 1") for p in retry_prompts)


def test_overflow_without_history_fails_as_data() -> None:
    model, _ = flaky([ModelHTTPError(400, "m", body={"error": "maximum context length is 8192"})])
    out = asyncio.run(run_agent(plain_agent(), "huge", role="strategist",
                                runtime=runtime({"default": model})))
    assert not out.ok and out.error_kind == "context_window"


def test_long_history_is_summarized_before_the_run() -> None:
    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return text("short summary")

    prompts_seen: list[list[str]] = []

    def main(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts_seen.append(user_prompts(messages))
        return text("ok")

    cfg = agents_cfg(summarize_after_tokens=1_000)
    rt = runtime({"default": FunctionModel(main), "summarizer": FunctionModel(summarize)}, cfg)
    history = _conversation(6, size=2_000)
    assert history_tokens(history) > 1_000
    out = asyncio.run(run_agent(plain_agent(), "go on", role="implementor", runtime=rt,
                                history=history))
    assert out.ok and out.summarized
    assert len(prompts_seen[0]) == 4  # head + summary, the latest exchange, the new prompt
    assert history_tokens(out.messages) < history_tokens(history)


def test_usage_cost_and_messages_are_recorded() -> None:
    model, _ = flaky([])
    cfg = agents_cfg(prices={"flaky": Price(input_usd_per_mtok=2.0, output_usd_per_mtok=10.0)})
    out = asyncio.run(run_agent(plain_agent(), "hello", role="analyst",
                                runtime=runtime({"default": model}, cfg)))
    c = out.call
    assert c.ok and c.input_tokens > 0 and c.output_tokens > 0 and c.requests == 1
    assert c.cost_usd == (c.input_tokens * 2.0 + c.output_tokens * 10.0) / 1e6
    assert len(c.prompt_hash) == 64
    msgs = json.loads(c.messages_json)
    assert msgs[0]["instructions"] == "Answer briefly."
    assert c.latency_s >= 0


def test_cost_is_none_when_unknown_and_table_price_when_known() -> None:
    cfg = agents_cfg()
    assert cost_usd(cfg, "function", 100, 100, provider="function") is None
    assert cost_usd(cfg, "my-local-model", 100, 100, provider="openai") is None
    assert cost_usd(cfg, "x", 10, 10, reported=0.25, provider="openai") == 0.25
    known = cost_usd(cfg, "gpt-4.1", 1_000_000, 0, provider="openai")
    assert known is not None and known > 0
    on_endpoints = agents_cfg(endpoints=["http://localhost:1/v1"])
    assert cost_usd(on_endpoints, "gpt-4.1", 1_000_000, 0, provider="openai") is None


def test_garbage_output_is_a_failure_not_an_exception() -> None:
    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return text("this is not JSON for an int")

    agent: Agent[None, int] = Agent(None, output_type=int, retries={"output": 1})
    out = asyncio.run(run_agent(agent, "number?", role="analyst",
                                runtime=runtime({"default": FunctionModel(fn)})))
    assert not out.ok and out.error_kind == "output" and out.output is None
    assert out.call.retries == 1  # the output retry is counted


def test_classify_http_statuses() -> None:
    assert classify(ModelHTTPError(429, "m")) == "rate_limit"
    assert classify(ModelHTTPError(502, "m")) == "server"
    assert classify(ModelHTTPError(404, "m")) == "not_found"
    assert classify(ModelHTTPError(400, "m", body="bad")) == "rejected"
    assert classify(TimeoutError()) == "timeout"
    assert classify(RuntimeError("bug")) == "other"
