"""Owns PIKE's agents: one plain-text query per call, no tools, no conversation, each role
with its own system prompt (`context/pike.py`: the brainstorm is not told to write code).

The Initial Brainstorming Agent (role `brainstorm`) answers with a bullet list of ideas; the
Code Optimization Agent (`optimize`; PIKE-O's `mutate` and `crossover`) and the Error-Fixing
Agent (`fix`) answer with code, taken from the first code block of the answer in a language a
design may be written in (python, C, C++, CUDA, text, ...; not a shell session), as the authors'
`extract_first_code` does. The prompts are the problem's domain's. Each query is exactly one model request
(`request_limit=1`, no output retries) and takes one of the caller's `Tickets` before it is
made; transport retries (timeouts, 429, 5xx) are counted apart, never as queries, so a phase
of parallel queries never spends more than it reserved. Every call is recorded with its role.
Failures are data (`Written` with an error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic_ai import Agent
from pydantic_ai.usage import UsageLimits

from stratagem.agents.calls import AgentRuntime, run_agent
from stratagem.agents.fix_loop import Written
from stratagem.agents.writers import ModelWriter, WriteRequest, writer_for
from stratagem.context import pike as prompts
from stratagem.core.design import text_files
from stratagem.core.problem import Problem
from stratagem.core.search import Reservation
from stratagem.domains import get_domain

ROLES = ("brainstorm", "optimize", "fix", "mutate", "crossover", "attack")
CODE_LANGUAGES = frozenset({"", "python", "py", "python3", "cpp", "c++", "c", "h", "cu", "cuda", "text", "txt",
                            "plain", "fortran", "f90", "rust", "make", "makefile", "cmake", "toml"})
"""The labels of a code block an answer's design is taken from (unlabelled included)."""
_BLOCK = re.compile(r"```([a-zA-Z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_NO_PROBLEM = Problem(name="", domain="", source="")
"""The problem of a model turn's request when none was given (a model turn does not read it;
of no domain: asking the registry for its domain is an error)."""
_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+(.+?)\s*$")


@dataclass
class Tickets:
    """The queries a phase may still issue: `granted` by its reservation, one taken per
    query before it is made (a transport retry is no query), so what the phase's calls are
    charged never exceeds what it reserved, however many run at once."""

    granted: int
    taken: int = 0

    @classmethod
    def of(cls, reservation: Reservation) -> Tickets:
        return cls(reservation.granted)

    @property
    def left(self) -> int:
        return self.granted - self.taken

    def take(self) -> bool:
        if self.taken >= self.granted:
            return False
        self.taken += 1
        return True


def extract_code(text: str) -> str | None:
    """The first code block's code whose label is one of `CODE_LANGUAGES`, or None."""
    for lang, body in _BLOCK.findall(text):
        if lang.lower() in CODE_LANGUAGES:
            return body.strip("\n") + "\n"
    return None


def parse_ideas(text: str, n: int) -> list[str]:
    """The ideas of a brainstorm answer (its bullet or numbered lines), resized to exactly `n`:
    trimmed, or padded by repeating the list (PIKE's `resize_list`); empty when none."""
    ideas = [m.group(1).strip() for line in text.splitlines() if (m := _BULLET.match(line))]
    ideas = [i for i in ideas if i]
    if not ideas or n <= 0:
        return []
    return [ideas[i % len(ideas)] for i in range(n)]


@dataclass
class PikeAgents:
    """The one-shot text agents of the PIKE roles, each with its own system prompt (the
    `domain`'s)."""

    runtime: AgentRuntime
    domain: str = field(kw_only=True)
    problem: Problem | None = None
    """The problem (a coding-agent writer's work directory holds it)."""
    agents: dict[str, Agent[None, str]] = field(default_factory=dict, init=False)

    def agent(self, role: str) -> Agent[None, str]:
        """The agent of `role` (`brainstorm`, `optimize`, `fix`, `mutate`, `crossover`, or the
        red-team policy's `attack`)."""
        if role not in self.agents:
            self.agents[role] = Agent(None, output_type=str, name=f"pike-{role}",
                                      instructions=prompts.instructions(role, self.domain), retries={"output": 0})
        return self.agents[role]

    async def ask(self, role: str, prompt: str, tickets: Tickets) -> Written:
        """One query as `role`: the answer's text as the turn's `source`, if a ticket is left
        (else a `budget` failure, nothing asked)."""
        if not tickets.take():
            return Written(None, error_kind="budget", error="the phase's query budget is spent")
        outcome = await run_agent(self.agent(role), prompt, role=role, runtime=self.runtime,
                                  usage_limits=UsageLimits(request_limit=1), model_key=role)
        if not outcome.ok or outcome.output is None:
            return Written(None, outcome.total_tokens, outcome.error_kind, outcome.error)
        return Written(str(outcome.output), outcome.total_tokens)

    async def write(self, role: str, prompt: str, tickets: Tickets, *, worker: str = "", current: str = "") -> Written:
        """A code query: the answer's first code block. An answer with no code block is kept
        whole as the candidate, so it is stored, fails the static checks with a syntax error and
        reaches the Error-Fixing Agent like any broken candidate (the query was spent). A role
        another backend takes (`runtime.writers`: a coding-agent command) is one query of that
        backend, given `current` (the design fixed or built on) as its starting files."""

        async def model_turn(req: WriteRequest) -> Written:
            a = await self.ask(role, req.prompt, tickets)
            code = extract_code(a.source) if a.source is not None else None
            return a if code is None else Written(code, a.tokens)

        model = ModelWriter(model_turn)
        writer = writer_for(self.runtime.writers, role, model)
        if writer is not model:
            if self.problem is None:
                return Written(None, 0, "other", f"the {role} writer needs the problem (PikeAgents.problem)")
            if not tickets.take():
                return Written(None, 0, "budget", "the phase's query budget is spent")
            main = get_domain(self.problem.domain).main_file(self.problem)
            files = text_files(current, main) if current.strip() else {}
            return await writer.write(WriteRequest(
                role=role, worker=worker or role, prompt=prompt, problem=self.problem,
                instructions=prompts.instructions(role, self.domain), files=files, record=self.runtime.record,
                meter=self.runtime.meter))
        return await model.write(WriteRequest(role=role, worker=worker or role, prompt=prompt,
                                              problem=self.problem or _NO_PROBLEM))
