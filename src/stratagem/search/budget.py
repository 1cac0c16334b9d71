"""Owns the run's budgets and what has been spent against them: LLM queries, tokens, money,
evaluation (GPU) seconds and wall-clock time.

The spend is rebuilt from the store (`Spend.from_store`: agent calls, evaluations and the
writers' tool runs are recorded), on resume, so budgets hold across a killed and resumed run,
and by every view of a run; the wall clock counts the current invocation.

Unknown usage. A coding-agent command that reports no usage leaves its call's tokens unknown
(None, never a made-up 0). Such a call is counted in `unreported_calls`, and `tokens` sums the
reported counts only. A token budget (`max_tokens`) cannot be kept over calls whose tokens
nobody knows, so it is used up (`exhausted`) from the first unreported call on: the run stops
with a reason that says so, rather than spend without limit while claiming a limit. (It cannot
refuse to start instead: whether a command reports its usage is known only once it has run.)
Runs without `max_tokens` go on; their reports say how many calls were unreported.

The budgets are limits, not targets. Every model request (and every coding-agent command call)
is asked of `Budgets` first, through the meter of the agent call it belongs to (`Budgets.meter`,
`CallMeter.admit`): a request is counted against `max_queries` when it is admitted, and each
answer's tokens and money against `max_tokens` and `max_usd` when it arrives, so calls in flight
at once see each other's spend; once a budget is spent, no further request is admitted and the
agent's turn ends as data (error kind `budget`). A phase's reservation (`reserve`) holds queries
for its own requests; a request inside it draws on it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from stratagem.config import SearchConfig
from stratagem.core.search import AgentCall, Remaining, Reservation
from stratagem.store.records import AgentCallRecord, EvaluationRecord

PROBES_KEY = "session/probes"
"""The store's policy state under which a run keeps its writers' tool runs (`check`,
`profile`): `{"runs": N, "seconds": S}`, S their worker seconds. They are not evaluations."""


class SpendStore(Protocol):
    """What a run's store holds of its spend (`RunStore`)."""

    def agent_calls(self) -> list[AgentCallRecord]: ...
    def evaluations(self) -> list[EvaluationRecord]: ...
    def policy_state(self, key: str) -> Any: ...


@dataclass
class Spend:
    """What a run has used so far."""

    queries: int = 0
    """LLM requests (every request of every agent run, retries included): what `max_queries` counts."""
    calls: int = 0
    """Agent calls (one role's run: a plan, an answer, a review), each of one or more requests."""
    input_tokens: int = 0
    """Reported input tokens (calls whose usage is unknown add nothing: `unreported_calls`)."""
    output_tokens: int = 0
    """Reported output tokens, as `input_tokens`."""
    unreported_calls: int = 0
    """Agent calls whose tokens are unknown (a command that reported no usage): not in `tokens`."""
    usd: float = 0.0
    unpriced_calls: int = 0
    """Agent calls whose model has no known price (their cost is not in `usd`)."""
    retries: int = 0
    failed_calls: int = 0
    gpu_seconds: float = 0.0
    """Worker time of every evaluation (validator durations), on whatever device evaluates."""
    evaluations: int = 0
    probes: int = 0
    """Runs of the writers' tools (`check`, `profile`): not evaluations, but their worker
    seconds are in `gpu_seconds`."""

    @property
    def tokens(self) -> int:
        """Reported tokens (input + output); see `tokens_known` and `unreported_calls`."""
        return self.input_tokens + self.output_tokens

    @property
    def tokens_known(self) -> bool:
        """Whether any call's tokens are known, or no call went unreported: False when every
        unreported call is all there is (then `tokens` would be a made-up 0)."""
        return self.unreported_calls == 0 or self.unreported_calls < self.calls

    def tokens_text(self) -> str:
        """`tokens 1,234`, `tokens 1,234 (2 of 5 agent calls unreported)`, or `tokens unknown
        (3 of 3 agent calls unreported)`: never a bare count that leaves unknown calls out."""
        if self.unreported_calls == 0:
            return f"tokens {self.tokens:,}"
        count = f"{self.tokens:,}" if self.tokens_known else "unknown"
        return f"tokens {count} ({self.unreported_calls} of {self.calls} agent calls unreported)"

    def to_json(self) -> dict[str, float | int | None]:
        """The `--json` view of the spend: `queries` are LLM requests, `calls` agent calls;
        `tokens` (and its parts) are the reported ones, null when no call reported any and some
        did not (`unreported_calls`)."""
        known = self.tokens_known
        return {"queries": self.queries, "calls": self.calls, "unpriced_calls": self.unpriced_calls,
                "unreported_calls": self.unreported_calls,
                "failed_calls": self.failed_calls, "retries": self.retries, "tokens": self.tokens if known else None,
                "input_tokens": self.input_tokens if known else None,
                "output_tokens": self.output_tokens if known else None, "usd": self.usd,
                "gpu_seconds": self.gpu_seconds, "evaluations": self.evaluations, "probes": self.probes}

    def add_call(self, call: AgentCall | AgentCallRecord) -> None:
        self.calls += 1
        self.queries += call.requests
        self.input_tokens += call.input_tokens or 0
        self.output_tokens += call.output_tokens or 0
        self.unreported_calls += int(call.input_tokens is None or call.output_tokens is None)
        self.retries += call.retries
        self.failed_calls += int(not call.ok)
        if call.cost_usd is None:
            self.unpriced_calls += int(call.requests > 0)
        else:
            self.usd += call.cost_usd

    def add_evaluation(self, ev: EvaluationRecord) -> None:
        self.evaluations += 1
        self.gpu_seconds += evaluation_seconds(ev)

    def add_probe(self, seconds: float) -> None:
        self.probes += 1
        self.gpu_seconds += seconds

    @classmethod
    def from_records(cls, calls: Sequence[AgentCallRecord], evaluations: Sequence[EvaluationRecord]) -> Spend:
        s = cls()
        for c in calls:
            s.add_call(c)
        for e in evaluations:
            s.add_evaluation(e)
        return s

    @classmethod
    def from_store(cls, store: SpendStore, evaluations: Sequence[EvaluationRecord] | None = None) -> Spend:
        """What a run's store says it spent: its agent calls, its evaluations (`evaluations`
        when already read) and its writers' tool runs (`PROBES_KEY`)."""
        s = cls.from_records(store.agent_calls(), store.evaluations() if evaluations is None else evaluations)
        tools = store.policy_state(PROBES_KEY) or {}
        s.probes = int(tools.get("runs", 0))
        s.gpu_seconds += float(tools.get("seconds", 0.0))
        return s


def evaluation_seconds(ev: EvaluationRecord) -> float:
    """Its validators' seconds, and the workers that ran before the one whose verdict stands
    (`earlier_runs_s`: cut at a provisional limit, or out of memory beside other work)."""
    return float(sum(v.get("duration_s") or 0.0 for v in ev.validators)) + float(ev.environment.get("earlier_runs_s") or 0.0)


_ACTIVE: contextvars.ContextVar[Reservation | None] = contextvars.ContextVar("stratagem_reservation", default=None)


@dataclass(eq=False)
class CallMeter:
    """One agent call's live account with the run's budgets (`core.search.Meter`): the requests
    it was admitted and the tokens and money its answers reported, counted until the call is
    recorded (`close`, then `Session.record_call`)."""

    budgets: Budgets
    reservation: Reservation | None
    """The reservation open where the call began (its requests draw on it), if any."""
    queries: int = 0
    tokens: int = 0
    usd: float = 0.0

    def admit(self) -> str | None:
        return self.budgets.admit(self)

    def answered(self, tokens: int, usd: float | None) -> None:
        self.tokens += tokens
        self.usd += usd or 0.0

    def queries_left(self) -> int | None:
        r = self.reservation
        if r is not None and not r.released:
            return r.left
        return self.budgets.remaining().queries

    def close(self, requests: int | None = None) -> None:
        self.budgets.close(self, requests)


class Budgets:
    """Limits from SearchConfig checked against a Spend, and query reservations."""

    def __init__(self, cfg: SearchConfig, spend: Spend, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.spend = spend
        self._clock = clock
        self._t0 = clock()
        self._held: list[Reservation] = []
        self._open: list[CallMeter] = []
        """The meters of agent calls in flight (not recorded yet)."""

    def held_queries(self) -> int:
        """Queries reserved and not used yet, over every open reservation."""
        return sum(r.left for r in self._held)

    def _live(self) -> tuple[int, int, float]:
        """(queries, tokens, usd) spent: the recorded calls' and those of the calls in flight."""
        return (self.spend.queries + sum(m.queries for m in self._open),
                self.spend.tokens + sum(m.tokens for m in self._open),
                self.spend.usd + sum(m.usd for m in self._open))

    def remaining(self) -> Remaining:
        """What is left of every limited budget (the calls in flight counted); queries net of
        open reservations."""
        c, s = self.cfg, self.spend
        queries, tokens, usd = self._live()
        return Remaining(
            queries=None if c.max_queries is None else max(0, c.max_queries - queries - self.held_queries()),
            tokens=None if c.max_tokens is None else 0 if s.unreported_calls else max(0, c.max_tokens - tokens),
            usd=None if c.max_usd is None else max(0.0, c.max_usd - usd),
            gpu_seconds=None if c.max_gpu_seconds is None else max(0.0, c.max_gpu_seconds - s.gpu_seconds),
            wall_seconds=None if c.max_wall_seconds is None else max(0.0, c.max_wall_seconds - self.wall_seconds),
        )

    @contextmanager
    def reserve(self, queries: int) -> Iterator[Reservation]:
        """Set aside up to `queries` queries for a phase (all of them without a query limit).
        A phase that issues at most `granted` queries, however many run at once, cannot take
        the run past `max_queries`; what it leaves unused returns to the pool on exit."""
        if queries < 0:
            raise ValueError(f"cannot reserve {queries} queries")
        left = self.remaining().queries
        r = Reservation(queries, queries if left is None else min(queries, left))
        self._held.append(r)
        token = _ACTIVE.set(r)
        try:
            yield r
        finally:
            r.released = True
            self._held.remove(r)
            _ACTIVE.reset(token)

    def meter(self) -> CallMeter:
        """The meter of an agent call starting now (in the calling context's reservation, if any)."""
        r = _ACTIVE.get()
        m = CallMeter(self, r if r is not None and not r.released else None)
        self._open.append(m)
        return m

    def admit(self, m: CallMeter) -> str | None:
        """The one place a model request is allowed or refused: None (admitted: counted at once
        against `max_queries`, and against `m`'s reservation when it has one) or why not (the
        budget that is spent, in `exhausted`'s words)."""
        if (spent := self.exhausted()) is not None:
            return spent
        r = m.reservation
        if r is not None and not r.released:
            if r.left <= 0:
                return f"max_queries (the {r.granted} queries reserved for this step are used)"
            r.used += 1
        elif (left := self.remaining().queries) is not None and left <= 0:
            assert self.cfg.max_queries is not None
            return (f"max_queries ({self._live()[0]} of {self.cfg.max_queries:g} sent, "
                    f"{self.held_queries()} reserved by a step in progress)")
        m.queries += 1
        return None

    def close(self, m: CallMeter, requests: int | None = None) -> None:
        """The call of `m` ended, having sent `requests` queries as its record counts them
        (None: all it was admitted): its spend is that record's from now on, and an admitted
        request the record does not count (refused by the provider) returns to its reservation."""
        if m in self._open:
            self._open.remove(m)
        r = m.reservation
        if requests is not None and r is not None and not r.released:
            r.used -= max(0, m.queries - requests)

    @property
    def wall_seconds(self) -> float:
        return self._clock() - self._t0

    def exhausted(self, compute_only: bool = False) -> str | None:
        """The first budget that is used up, as `max_queries (12 of 12)` (the calls in flight
        counted); None while all have room. A token budget with an unreported call is used up (the module's docstring).
        `compute_only`: only the budgets harness work spends (GPU seconds, wall clock), for work
        that asks no model (the red-team audit)."""
        c, s = self.cfg, self.spend
        if compute_only:
            c = c.model_copy(update={"max_queries": None, "max_tokens": None, "max_usd": None})
        if c.max_tokens is not None and s.unreported_calls:
            return (f"max_tokens (--max-tokens {c.max_tokens:g} cannot be kept: {s.unreported_calls} of "
                    f"{s.calls} agent calls reported no token usage; bound such a run with --max-queries or "
                    "--max-wall-seconds, or have the agent print its usage as docs/agents.md says)")
        queries, tokens, usd = self._live()
        checks = (
            ("max_queries", c.max_queries, queries),
            ("max_tokens", c.max_tokens, tokens),
            ("max_usd", c.max_usd, usd),
            ("max_gpu_seconds", c.max_gpu_seconds, s.gpu_seconds),
            ("max_wall_seconds", c.max_wall_seconds, self.wall_seconds),
        )
        for name, limit, used in checks:
            if limit is not None and used >= limit:
                return f"{name} ({used:.4g} of {limit:g})"
        return None
