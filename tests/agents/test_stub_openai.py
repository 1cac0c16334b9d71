"""Real pydantic-ai Agents, through the real OpenAI client, against the local `StubOpenAIServer`.

Model requests are disabled suite-wide (tests/conftest.py); these tests re-enable them for their
own duration only, since the stub is a local server, not an LLM.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx2  # the HTTP library openai 3.x and pydantic-ai use here (there is no `httpx`)
import pydantic_ai.models
import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from stub_openai import JSON, HTTPError, StubOpenAIServer, Text, ToolCall, find_tool, tool_messages

T = TypeVar("T")


class Verdict(BaseModel):
    """A structured output like the agents' answers."""

    design_id: str
    ok: bool
    notes: str


@pytest.fixture(autouse=True)
def _allow_model_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stub is local: allow model requests for these tests only."""
    monkeypatch.setattr(pydantic_ai.models, "ALLOW_MODEL_REQUESTS", True)


@asynccontextmanager
async def stub_model(
    stub: StubOpenAIServer, *, max_retries: int = 0
) -> AsyncIterator[OpenAIChatModel]:
    """An `OpenAIChatModel` talking to `stub`, with no proxies and `max_retries` SDK retries."""
    async with httpx2.AsyncClient(trust_env=False, timeout=10) as http:
        client = AsyncOpenAI(
            base_url=stub.base_url, api_key="stub", max_retries=max_retries, http_client=http
        )
        yield OpenAIChatModel("stub-model", provider=OpenAIProvider(openai_client=client))


def run(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine under a 5-second cap (a broken stub must fail fast, not hang)."""

    async def capped() -> T:
        return await asyncio.wait_for(make(), timeout=5)

    return asyncio.run(capped())


def output_tool_name(request: JSON) -> str:
    """The name of the output tool pydantic-ai offered in `request` (the one not defined by us)."""
    assert request.get("tool_choice") == "required", request.get("tool_choice")
    names = [
        t["function"]["name"] for t in request["tools"] if t["function"]["name"] != "read_design"
    ]
    assert len(names) == 1, names
    return names[0]


def test_plain_text_and_usage() -> None:
    with StubOpenAIServer([Text("hello there", prompt_tokens=123, completion_tokens=45)]) as stub:

        async def go() -> Any:
            async with stub_model(stub) as model:
                return await Agent(model, instructions="Be brief.").run("say hi")

        result = run(go)
    assert result.output == "hello there"
    assert result.usage.input_tokens == 123
    assert result.usage.output_tokens == 45
    assert result.usage.requests == 1
    [req] = stub.requests
    assert req["model"] == "stub-model"
    assert req["stream"] is False  # agent.run does not stream
    assert "tools" not in req
    assert req["messages"][0] == {"role": "system", "content": "Be brief."}
    assert req["messages"][-1] == {"role": "user", "content": "say hi"}
    assert stub.request_headers[0]["authorization"] == "Bearer stub"
    assert not stub.failures and stub.remaining == 0


def test_structured_output() -> None:
    seen: list[str] = []

    def answer(req: JSON) -> ToolCall:
        name = output_tool_name(req)
        seen.append(name)
        tool = find_tool(req, name)
        assert tool is not None
        params = tool["function"]["parameters"]
        assert set(params["required"]) == {"design_id", "ok", "notes"}
        return ToolCall(name, {"design_id": "d-1", "ok": True, "notes": "fine"})

    with StubOpenAIServer([answer]) as stub:

        async def go() -> Any:
            async with stub_model(stub) as model:
                return await Agent(model, output_type=Verdict).run("judge d-1")

        result = run(go)
    assert result.output == Verdict(design_id="d-1", ok=True, notes="fine")
    assert seen == ["final_result"]  # pydantic-ai 2.68's name; tests should look it up as above
    assert not stub.failures


def test_function_tool_round_trip() -> None:
    def call_tool(req: JSON) -> ToolCall:
        tool = find_tool(req, "read_design")
        assert tool is not None, req.get("tools")
        assert tool["function"]["parameters"]["required"] == ["design_id"]
        assert tool["function"]["description"] == "Read a design's source by id."
        return ToolCall("read_design", {"design_id": "d-42"}, id="call_read")

    def finish(req: JSON) -> ToolCall | HTTPError:
        results = tool_messages(req)
        if results != [{"role": "tool", "tool_call_id": "call_read", "content": "source of d-42"}]:
            return HTTPError(400, f"unexpected tool results: {results}")
        args = {"design_id": "d-42", "ok": False, "notes": results[0]["content"]}
        return ToolCall(output_tool_name(req), args)

    reads: list[str] = []
    with StubOpenAIServer([call_tool, finish]) as stub:

        async def go() -> Any:
            async with stub_model(stub) as model:
                agent = Agent(model, output_type=Verdict)

                @agent.tool_plain
                def read_design(design_id: str) -> str:
                    """Read a design's source by id."""
                    reads.append(design_id)
                    return f"source of {design_id}"

                return await agent.run("review d-42")

        result = run(go)
    assert reads == ["d-42"]
    assert result.output == Verdict(design_id="d-42", ok=False, notes="source of d-42")
    assert result.usage.requests == 2 and result.usage.tool_calls == 1
    assert result.usage.input_tokens == 20  # summed over both requests
    first, second = stub.requests
    assert {t["function"]["name"] for t in first["tools"]} == {"read_design", "final_result"}
    assistant = second["messages"][-2]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["function"] == {
        "name": "read_design",
        "arguments": '{"design_id":"d-42"}',
    }
    assert not stub.failures and stub.remaining == 0


def test_rate_limit_surfaces_without_sdk_retries() -> None:
    """With `max_retries=0`, a 429 is a `ModelHTTPError`; pydantic-ai itself does not retry it."""
    script = [HTTPError(429, headers={"Retry-After": "1"}), Text("ok after 429")]
    with StubOpenAIServer(script) as stub:

        async def go() -> tuple[ModelHTTPError, str]:
            async with stub_model(stub, max_retries=0) as model:
                agent = Agent(model)
                with pytest.raises(ModelHTTPError) as info:
                    await agent.run("hi")
                assert len(stub.requests) == 1  # no retry at any layer
                second = await agent.run("hi")  # the caller retries: the script's next item
                return info.value, second.output

        err, output = run(go)
    assert err.status_code == 429
    assert err.retry_after == 1.0  # parsed from Retry-After (integer seconds only)
    assert isinstance(err.body, dict) and err.body["code"] == "rate_limit_exceeded"
    assert output == "ok after 429"
    assert len(stub.requests) == 2 and not stub.failures


def test_sdk_retries_a_rate_limit_itself() -> None:
    """With SDK retries on (openai's default is 2), a 429 is retried invisibly to pydantic-ai."""
    script = [HTTPError(429, headers={"retry-after-ms": "10"}), Text("ok")]
    with StubOpenAIServer(script) as stub:

        async def go() -> Any:
            async with stub_model(stub, max_retries=1) as model:
                return await Agent(model).run("hi")

        result = run(go)
    assert result.output == "ok"
    assert result.usage.requests == 1  # pydantic-ai counts one request; the stub saw two
    assert [h["x-stainless-retry-count"] for h in stub.request_headers] == ["0", "1"]
    assert stub.requests[0] == stub.requests[1]


def test_server_error_and_exhausted_script() -> None:
    """A scripted 500 and an unscripted request both surface as `ModelHTTPError` 500."""
    with StubOpenAIServer([HTTPError(500, headers={"x-should-retry": "false"})]) as stub:

        async def go() -> list[int]:
            codes = []
            async with stub_model(stub, max_retries=2) as model:
                for _ in range(2):
                    with pytest.raises(ModelHTTPError) as info:
                        await Agent(model).run("hi")
                    codes.append(info.value.status_code)
            return codes

        assert run(go) == [500, 500]
    assert len(stub.requests) == 2  # `x-should-retry: false` stops the SDK's retries
    assert stub.failures == ["request 1: script exhausted"]


def test_streaming_text_and_tool_call() -> None:
    """`run_stream` (and `run` with an event handler) use SSE with `include_usage`."""

    def final(req: JSON) -> ToolCall:
        return ToolCall(output_tool_name(req), {"design_id": "d-7", "ok": True, "notes": "n"})

    script = [
        Text("a streamed answer, in several chunks", prompt_tokens=7, completion_tokens=3),
        final,
    ]
    with StubOpenAIServer(script) as stub:

        async def go() -> tuple[list[str], Any, Verdict]:
            async with stub_model(stub) as model:
                async with Agent(model).run_stream("hi") as streamed:
                    texts = [t async for t in streamed.stream_text()]
                usage = streamed.usage

                async def ignore(_ctx: Any, events: AsyncIterator[Any]) -> None:
                    async for _ in events:
                        pass

                agent = Agent(model, output_type=Verdict)
                verdict = (await agent.run("judge", event_stream_handler=ignore)).output
            return texts, usage, verdict

        texts, usage, verdict = run(go)
    assert texts[-1] == "a streamed answer, in several chunks"
    assert (usage.input_tokens, usage.output_tokens) == (7, 3)
    assert verdict == Verdict(design_id="d-7", ok=True, notes="n")
    assert [r["stream"] for r in stub.requests] == [True, True]
    assert all(r["stream_options"] == {"include_usage": True} for r in stub.requests)
    assert not stub.failures


def test_models_endpoint() -> None:
    with StubOpenAIServer(models=["m-a", "m-b"]) as stub:

        async def go() -> list[str]:
            async with httpx2.AsyncClient(trust_env=False) as http:
                client = AsyncOpenAI(base_url=stub.base_url, api_key="stub", http_client=http)
                return [m.id async for m in client.models.list()]

        assert run(go) == ["m-a", "m-b"]
    assert stub.requests == []  # only chat requests are recorded


def test_model_settings_max_retries_overrides_the_client() -> None:
    """`ModelSettings(max_retries=0)` turns off the SDK retries of a client built with retries."""
    script = [HTTPError(429), Text("unused")]
    with StubOpenAIServer(script) as stub:

        async def go() -> int:
            async with stub_model(stub, max_retries=2) as model:
                agent = Agent(model, model_settings={"max_retries": 0})
                with pytest.raises(ModelHTTPError) as info:
                    await agent.run("hi")
                return info.value.status_code

        assert run(go) == 429
    assert len(stub.requests) == 1 and stub.remaining == 1
