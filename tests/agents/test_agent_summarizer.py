"""The Summarizer's message surgery: head and latest exchange kept, tool calls stay paired."""

from __future__ import annotations

import asyncio

from agent_fakes import output, scripted, user_prompts
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)

from stratagem.agents.summarizer import rebuild, split_history, transcript


class Out(BaseModel):
    source: str


def conversation(turns: int) -> list[ModelMessage]:
    """A real pydantic-ai history like an Implementor's: structured answers, then feedback."""
    agent: Agent[None, Out] = Agent(None, output_type=Out, instructions="write code")
    model = scripted(lambda m, i: output(i, {"source": f"v{len(user_prompts(m))}"}))
    history: list[ModelMessage] = []
    for k in range(turns):
        r = asyncio.run(agent.run(f"prompt {k}", message_history=history or None, model=model))
        history = r.all_messages()
    return history


def paired(messages: list[ModelMessage]) -> bool:
    calls: set[str] = set()
    for m in messages:
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                calls.add(p.tool_call_id)
            elif isinstance(p, ToolReturnPart) and p.tool_call_id not in calls:
                return False
    return True


def test_split_and_rebuild_keep_head_and_latest_exchange() -> None:
    history = conversation(4)
    head, middle, tail = split_history(history)
    assert head is history[0] and middle and tail
    assert user_prompts(tail)[0] == "prompt 3"
    new = rebuild(head, "earlier: v1 and v2 failed", tail)
    prompts = user_prompts(new)
    assert prompts[0] == "prompt 0" and "earlier: v1 and v2 failed" in prompts[1]
    assert prompts[-1] == "prompt 3"
    assert isinstance(new[0], ModelRequest) and isinstance(new[1], ModelResponse)
    assert paired(new) and len(new) < len(history)
    # pydantic-ai accepts the rebuilt history
    agent: Agent[None, Out] = Agent(None, output_type=Out)
    r = asyncio.run(agent.run("prompt 4", message_history=new,
                              model=scripted(lambda m, i: output(i, {"source": "v9"}))))
    assert r.output.source == "v9"


def test_nothing_to_compress_in_a_short_history() -> None:
    head, middle, tail = split_history(conversation(1)[:2])
    assert head is None and not middle
    head, middle, tail = split_history(conversation(1))  # one long turn: all after the head
    assert head is not None and len(middle) == 2 and tail == []


def test_transcript_is_capped() -> None:
    history = conversation(6)
    text = transcript(history, 300)
    assert len(text) <= 300 and "chars cut" in text
    assert "USER: prompt 0" in transcript(history, 100_000)
    assert "TOOL CALL final_result" in transcript(history, 100_000)
