"""Owns the fix-until-valid loop any policy can drive with its own prompts: write a candidate,
evaluate it through the Session, and, while it fails, write again from a prompt made of the
feedback (the report, the failure kind, the error's tail, the largest differences).

The writer is any coroutine (an LLM conversation, in practice): the loop itself knows no
model and no prompt. It stops at an accepted verdict, after `max_attempts` evaluations, when
the writer has used `token_limit` tokens, when a run budget is exhausted, or on a failed
writing turn; the result says which (failures are data). AUTO's Implementor and PIKE's
Error-Fixing Agent both run on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from stratagem.core.search import Feedback, Session

ACCEPTED = ("valid", "unreviewed", "unstable", "busy")
"""Verdicts that end the loop: the harness passed the design (a pending review or re-timing
is not the writer's job: a design not timed because the machine was busy is timed again by the
run, and asking its writer to "fix" it spent an evaluation and a query on a restatement the run
refused, as a real model did on a loaded CPU)."""


@dataclass(frozen=True)
class Written:
    """One writing turn: the candidate's source (a text agent's query: its answer's text), or why
    there is none."""

    source: str | None
    tokens: int = 0
    error_kind: str | None = None
    """`usage_limit`, `output`, `timeout`, `budget` (the run's budget refused a request), ...
    when `source` is None."""
    error: str | None = None


@dataclass(frozen=True)
class FixLimits:
    max_attempts: int
    """Evaluations at most."""
    token_limit: int | None = None
    """Tokens the writer may use over all its turns (None: no limit)."""


@dataclass(frozen=True)
class FixResult:
    status: Literal["valid", "failed"]
    reason: str
    design_ids: tuple[str, ...] = ()
    attempts: int = 0
    """Evaluations requested."""
    tokens: int = 0
    feedback: Feedback | None = None
    """The last evaluation's feedback."""
    error_kinds: tuple[str, ...] = ()
    failed_turn: Written | None = None
    """The writing turn that ended the loop, when one did."""

    @property
    def ok(self) -> bool:
        return self.status == "valid"


@dataclass
class _Tally:
    tokens: int = 0
    attempts: int = 0
    ids: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    feedback: Feedback | None = None


Write = Callable[[str, int | None], Awaitable[Written]]
"""(prompt, tokens still allowed or None) -> one writing turn."""


@dataclass(frozen=True)
class Attempt:
    """How one attempt's design is stored: its strategy, parents and tags."""

    strategy: str
    parents: Sequence[str] = ()
    tags: Mapping[str, Any] | None = None


Describe = Callable[[int, str | None], Attempt]
"""(attempt number from 1, the previous attempt's design id or None) -> how to store it."""


async def fix_until_valid(
    session: Session,
    worker: str,
    *,
    prompt: str,
    write: Write,
    next_prompt: Callable[[Feedback, int], str],
    limits: FixLimits,
    strategy: str,
    parents: Sequence[str] = (),
    tags: Mapping[str, Any] | None = None,
    accept: Collection[str] = ACCEPTED,
    describe: Describe | None = None,
    accept_restated: bool = True,
) -> FixResult:
    """Write, evaluate and rewrite until a verdict in `accept`; never raises for a writer's
    failure. `next_prompt(feedback, attempts)` makes the prompt after a failed evaluation;
    every design is evaluated as authored by `worker`, with `strategy`, `parents`, `tags`, or
    as `describe(attempt, previous id)` says when given (a fix stored as the child of the
    attempt it fixes, with its round in its tags). A candidate that restates a design already
    evaluated (`Feedback.duplicate_of`) ends the loop only when `accept_restated`; otherwise the
    writer is told and writes again (it costs an attempt, no evaluation)."""
    t = _Tally()

    def done(status: Literal["valid", "failed"], reason: str, turn: Written | None = None) -> FixResult:
        session.set_status(worker, f"{status}: {reason}"[:120])
        return FixResult(status, reason, tuple(dict.fromkeys(t.ids)), t.attempts, t.tokens, t.feedback,
                         tuple(t.kinds), turn)

    limit = limits.token_limit
    while True:
        if (exhausted := session.budget_left()) is not None:
            return done("failed", f"the run's {exhausted} budget is exhausted")
        if t.attempts >= limits.max_attempts:
            return done("failed", f"no valid design after {t.attempts} evaluations")
        if limit is not None and t.tokens >= limit:
            return done("failed", f"token limit reached ({t.tokens} of {limit} tokens)")
        session.set_status(worker, f"attempt {t.attempts + 1}: writing")
        turn = await write(prompt, None if limit is None else limit - t.tokens)
        t.tokens += turn.tokens
        if turn.source is None:
            t.kinds.append(turn.error_kind or "other")
            if turn.error_kind == "budget":  # the run's budget refused the turn's next request
                return done("failed", f"stopped: {turn.error}", turn)
            return done("failed", f"writer failure: {turn.error}", turn)
        t.attempts += 1
        session.set_status(worker, f"attempt {t.attempts}: evaluating")
        how = (describe(t.attempts, t.ids[-1] if t.ids else None) if describe is not None
               else Attempt(strategy, parents, tags))
        fb = await session.evaluate(turn.source, strategy=how.strategy, parents=how.parents, author=worker,
                                    tags=how.tags)
        t.ids.append(fb.design_id)
        t.feedback = fb
        if fb.status in accept and (accept_restated or fb.duplicate_of is None):
            speed = f" ({fb.speedup:.3g}x)" if fb.speedup is not None else ""
            return done("valid", f"valid after {t.attempts} evaluation(s){speed}")
        prompt = next_prompt(fb, t.attempts)
