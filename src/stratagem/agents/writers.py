"""Owns the writer seam: the one interface through which every role that writes designs (AUTO's
Implementor; PIKE's optimizer, error fixer, mutation and crossover) gets its code.

A role builds a `WriteRequest` (its prompt, its instructions, the current design's files) and
asks the `Writer` its `AgentRuntime` routes it to (`writer_for`). Backends:

- `ModelWriter`: the role's pydantic-ai turn (a conversation for the Implementor, one query for
  PIKE's roles), the default, unchanged;
- `CommandWriter` (`agents/agent_command.py`): a coding-agent command run in a fresh work
  directory, for the roles `[agents.command]` names;
- the tests' scripted answers (`ScriptWriter`, tests/agents/agent_fakes.py).

Every backend returns a `Written` (the design as one text, or why there is none) and records
one `AgentCall` per call through the request's `record`, so budgets count every backend alike;
a backend that is no model (a command, a script) asks the request's `meter` before each call,
as a model's requests do (`agents/calls.py`), and a call the budget refuses is not made.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from stratagem.agents.fix_loop import Written
from stratagem.core.problem import Problem
from stratagem.core.search import AgentCall, Meter

Record = Callable[[AgentCall], None]


@dataclass(frozen=True)
class WriteRequest:
    """One writing turn of one role."""

    role: str
    """`implementor`, `optimize`, `fix`, `mutate` or `crossover` (config.WRITER_ROLES)."""
    worker: str
    """Who writes (`implementor-1`, `b0/c3`): the design's author and the live-view name."""
    prompt: str
    """The role's curated context: the task, the designs it builds on, the last feedback."""
    problem: Problem
    instructions: str = ""
    """The role's standing instructions (a model's system prompt)."""
    files: Mapping[str, str] = field(default_factory=dict[str, str])
    """The current design's files (the one being fixed, mutated or built on); empty for a new one."""
    tokens_left: int | None = None
    """Tokens the writer may still use in this conversation (None: no limit)."""
    record: Record | None = None
    """Where the call's `AgentCall` goes (the Session's `record_call`)."""
    meter: Callable[[], Meter] | None = None
    """A new call's meter (the Session's `meter`): a call it does not admit is not made."""

    def admitted(self) -> tuple[Meter | None, Written | None]:
        """One query of a backend that is no model: its meter, or the `budget` failure that
        ends the turn when the run's budget refuses it (its meter closed, nothing made)."""
        m = self.meter() if self.meter is not None else None
        if m is None or (spent := m.admit()) is None:
            return m, None
        m.close()
        return None, Written(None, 0, "budget", f"the run's budget is spent: {spent}")


class Writer(Protocol):
    """Anything that turns a `WriteRequest` into a design. Never raises for the writer's own
    failure (a failed, hung or silent agent is a `Written` with an error); only cancellation
    propagates."""

    async def write(self, req: WriteRequest) -> Written: ...


@dataclass(frozen=True)
class ModelWriter:
    """The pydantic-ai backend: the role's own model turn (it records its calls itself, through
    `run_agent`)."""

    turn: Callable[[WriteRequest], Awaitable[Written]]

    async def write(self, req: WriteRequest) -> Written:
        return await self.turn(req)


@dataclass(frozen=True)
class WriterRoutes:
    """Which writing roles another backend takes over from the models (`[agents.command]`)."""

    writer: Writer
    roles: frozenset[str]

    def pick(self, role: str, default: Writer) -> Writer:
        return self.writer if role in self.roles else default


def writer_for(routes: WriterRoutes | None, role: str, default: Writer) -> Writer:
    """The writer of `role`: the routed backend when it takes the role, else `default` (the
    role's model)."""
    return default if routes is None else routes.pick(role, default)

