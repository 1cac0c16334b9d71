"""Owns the Summarizer: compressing a long conversation into a short summary message.

A history is split into its head (the first request: system prompt and the task), a middle
(what gets summarized) and a tail (the latest exchange, starting at the last user message, so
tool calls and their results stay paired). The rebuilt history is the head with the summary
appended as a user message, an acknowledging reply, then the tail: turns still alternate.

The run itself (with retries and accounting) is `calls.run_agent`'s business; this module only
builds the agent and does the message surgery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model

from stratagem.context import render

PART_CHARS = 3_000
"""Each part of the transcript handed to the Summarizer is cut to this many characters."""


def build_summarizer(model: Model | None = None) -> Agent[None, str]:
    """A fresh Summarizer agent (plain text output)."""
    return Agent(model, output_type=str, instructions=render.instructions("summarizer", domain=None),
                 name="summarizer")


def _has_user_prompt(m: ModelMessage) -> bool:
    return isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts)


def split_history(
    history: Sequence[ModelMessage],
) -> tuple[ModelRequest | None, list[ModelMessage], list[ModelMessage]]:
    """(head, middle, tail); an empty middle means there is nothing to compress."""
    msgs = list(history)
    if len(msgs) < 3 or not isinstance(msgs[0], ModelRequest):
        return None, [], msgs
    starts = [i for i, m in enumerate(msgs) if i > 0 and _has_user_prompt(m)]
    tail_start = starts[-1] if starts else len(msgs)
    return msgs[0], msgs[1:tail_start], msgs[tail_start:]


def _clip(text: str, limit: int = PART_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 40] + f" ... [{len(text) - limit + 40} chars cut]"


def transcript(messages: Sequence[ModelMessage], max_chars: int) -> str:
    """Plain-text transcript of messages for the Summarizer, at most `max_chars` (head and tail)."""
    lines: list[str] = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, UserPromptPart):
                content = p.content if isinstance(p.content, str) else str(p.content)
                lines.append(f"USER: {_clip(content)}")
            elif isinstance(p, TextPart):
                lines.append(f"ASSISTANT: {_clip(p.content)}")
            elif isinstance(p, ToolCallPart):
                lines.append(f"TOOL CALL {p.tool_name}: {_clip(p.args_as_json_str())}")
            elif isinstance(p, ToolReturnPart):
                label = "CHECK FAILED" if getattr(p, "outcome", None) == "retried" else "TOOL RESULT"
                lines.append(f"{label} {p.tool_name}: {_clip(p.model_response_str())}")
            elif isinstance(p, RetryPromptPart | RetryFeedbackPart):
                lines.append(f"CHECK FAILED: {_clip(p.model_response())}")
            elif isinstance(p, ThinkingPart):
                continue
    text = "\n\n".join(lines)
    if len(text) <= max_chars:
        return text
    head = max_chars // 3
    tail = max_chars - head - 60
    return text[:head] + f"\n\n[... {len(text) - head - tail} chars cut ...]\n\n" + text[-tail:]


def rebuild(head: ModelRequest, summary: str, tail: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The compressed history: head + summary message, an acknowledgement, then the tail.

    The tail's first request may also answer tool calls made in the summarized middle (pydantic-ai
    merges a new prompt into the request carrying the previous tool results); those answers are
    dropped, since a tool result without its call is rejected by providers.
    """
    first = replace(head, parts=[*head.parts, UserPromptPart(render.summary_message(summary))])
    ack = ModelResponse(parts=[TextPart(render.summary_acknowledgement())])
    rest = list(tail)
    if rest and isinstance(rest[0], ModelRequest):
        orphan = (ToolReturnPart, RetryPromptPart, RetryFeedbackPart)
        rest[0] = replace(rest[0], parts=[p for p in rest[0].parts if not isinstance(p, orphan)])
    return [first, ack, *rest]
