"""Owns the records the run loop and the policies exchange: plans, design views, feedback,
agent-call accounting, and the Policy and Session protocols.

Standard library only, so policies, agents and the loop can all import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from stratagem.core.confirmed import ConfirmedDesign
from stratagem.core.problem import Problem
from stratagem.core.verdict import Verdict

ProbeMode = Literal["check", "profile"]
"""The writers' tools (`Session.probe`): `check` builds a design and compares it with the
reference, untimed; `profile` says where one call's time goes. Neither is a verdict."""
PROBE_MODES: tuple[ProbeMode, ...] = ("check", "profile")

Strategy = Literal["innovate", "combine", "refine", "reattempt_failure"]
"""The strategies AUTO's Strategist picks from (`agents/strategist.py`'s `PlanOutput.strategy`)."""

DesignStatus = Literal["valid", "invalid", "error", "flagged", "unreviewed", "unstable", "busy", "needs_gpu"]
"""`flagged`: valid by the harness but judged cheating by the Analyst's review; `unreviewed`:
valid by the harness and fast enough to need the review, which failed (an LLM error): it may
not become the best until a later review clears it; `unstable`: valid, but its timing stayed
unstable after its re-timings (the reason is in the report): it is not ranked until a stable
re-timing exists; `busy`: valid by every check, but not measured: the machine was busy
for too much of its timing (what was seen is in the report); it has no ratio and is timed
again at a later iteration."""

MEASURED: frozenset[str] = frozenset({"valid", "unreviewed", "unstable"})
"""Statuses of designs the harness passed and timed."""
PASSED: frozenset[str] = MEASURED | {"busy"}
"""Statuses of designs the harness passed (timed or not: `busy`)."""


@dataclass(frozen=True)
class Plan:
    """The Strategist's decision for one iteration."""

    strategy: str
    """One of `Strategy` for `auto`; the recipe batch name for `recipes`."""
    evidence: tuple[str, ...] = ()
    """Ids of the designs the plan builds on."""
    rationale: str = ""
    instructions: str = ""
    """Concrete implementation instructions for the Implementors (the part they share)."""
    variants: tuple[str, ...] = ()
    """One distinct variant per Implementor (a tile size, an algorithm, a precision): K variants
    run K Implementors, each exploring its own point; none runs one Implementor."""

    def to_json(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "evidence": list(self.evidence),
                "rationale": self.rationale, "instructions": self.instructions,
                "variants": list(self.variants)}


@dataclass(frozen=True)
class Measures:
    """What the harness measured of one design, as the agents are shown it (None: not measured)."""

    runtime_q1_ms: float | None = None
    runtime_q3_ms: float | None = None
    """The candidate's timed calls' quartiles (its median is `DesignView.runtime_ms`)."""
    reference_ms: float | None = None
    """The reference's median, timed beside it in the same worker."""
    pairs: int | None = None
    """Block pairs the paired speedup was computed from."""
    compile_s: float | None = None
    """Seconds of the domain's compile stage (`WorkerSpec.compile_stage`: PyTorch's load, a command
    problem's build)."""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    """The largest differences from the reference over the correctness trials."""
    failures: tuple[str, ...] = ()
    """`validator (kind): reason` for every validator that failed."""
    kernels: tuple[tuple[str, float], ...] = ()
    """The top kernels by device time (name, microseconds), when a profile exists (GPU)."""
    floor_ms: float | None = None
    """The harness's roofline floor: the least time the work can take at the device's
    calibrated peaks (None: not checked)."""
    floor_fraction: float | None = None
    """The floor over the design's time (1.0: at the floor; the headroom left is what is below 1;
    above 1: faster than the estimate, which the margin admits)."""
    floor_margin: float | None = None
    """How far under the floor a time may honestly be (the floor is an estimate from calibrated
    peaks): only a time under floor x (1 - margin) is rejected as impossible."""
    floor_basis: str | None = None
    """What bounds the floor, in the domain's words (the rate its work is set against and the
    precisions a design may compute in under the correctness rule); None: the domain does not say."""
    correctness_rule: str | None = None
    """Which correctness rule decided its trials, with the precision the reference ran at, in
    words (None: the domain does not say)."""

    def floor_text(self) -> str:
        """The roofline figure named for what it is: an estimate of the least time (the work at
        the device's calibrated peaks), the design's speed as a share of the estimate's, and the
        time under which a design is rejected ('' when not checked)."""
        if self.floor_ms is None:
            return ""
        at = (f"; this design runs at {self.floor_fraction:.0%} of the estimate's speed"
              + (" (faster than the estimate, within the margin the harness admits)" if self.floor_fraction > 1 else "")
              if self.floor_fraction is not None else "")
        cut = (f"; only a time under {self.floor_ms * (1 - self.floor_margin):.4g} ms (the estimate less "
               f"{self.floor_margin:.0%}) is rejected as impossible" if self.floor_margin is not None else "")
        basis = f"; {self.floor_basis}" if self.floor_basis else ""
        return (f"roofline estimate {self.floor_ms:.4g} ms (the work at the device's calibrated peaks: an "
                f"estimate of the least time, not a measured limit{basis}){at}{cut}")

    def lines(self, reference: str = "the reference") -> list[str]:
        """The measurements as short lines (what a prompt and `read_design` show); `reference`:
        the reference as the domain names it (`BaselineNames.reference`)."""
        out = []
        if self.runtime_q1_ms is not None and self.runtime_q3_ms is not None:
            ref = f"; {reference} beside it {self.reference_ms:.4g} ms" if self.reference_ms is not None else ""
            pairs = f" over {self.pairs} block pairs" if self.pairs else ""
            out.append(f"timed: quartiles {self.runtime_q1_ms:.4g}-{self.runtime_q3_ms:.4g} ms{pairs}{ref}")
        if self.compile_s is not None:
            out.append(f"build time: {self.compile_s:.3g} s")
        if self.max_abs_err is not None:
            rel = f", max rel {self.max_rel_err:.3g}" if self.max_rel_err is not None else ""
            out.append(f"error vs reference: max abs {self.max_abs_err:.3g}{rel}")
        if self.floor_ms is not None:
            out.append(self.floor_text())
        if self.kernels:
            out.append("top kernels (device time of one call): "
                       + ", ".join(f"{n[:60]} {t:.3g} us" for n, t in self.kernels[:5]))
        return out


@dataclass(frozen=True)
class DesignView:
    """One design as the search sees it: source, lineage and its latest verdict."""

    id: str
    source: str
    status: DesignStatus
    iteration: int | None = None
    strategy: str | None = None
    author: str | None = None
    """`implementor-2`, `recipe:NAME`, `file`, ..."""
    parents: tuple[str, ...] = ()
    runtime_ms: float | None = None
    speedup: float | None = None
    """The paired speedup over the reference (reference time / design time, timed side by side
    in the design's own worker); None unless valid and timed."""
    report: str = ""
    """The validators' failure report (`Verdict.report()`), or the review's reason."""
    created_at: float = 0.0
    speedup_low: float | None = None
    speedup_high: float | None = None
    """The paired speedup's 95% interval."""
    speedup_compared: float | None = None
    """The speedup over the baseline the domain sets beside the reference
    (`BaselineNames.compared`), chained through the run's reference/baseline ratio."""
    compared_low: float | None = None
    compared_high: float | None = None
    """The chained speedup's interval (None when unknown)."""
    stability: str = ""
    """Why the timing is unstable ('' when stable or unknown)."""
    compared_fails: str = ""
    """Why the compared baseline fails the correctness rule ('' when it passes): its
    `speedup_compared` is then against a baseline no candidate could be."""
    tags: dict[str, Any] = field(default_factory=dict)
    """The policy's own metadata for this design (`Session.tag`: an island, a parent
    selector's notes, a recipe's name), persisted in the run database."""
    compared_unstable: str = ""
    """Why the compared baseline's timing stayed unstable after re-timing ('' when stable): its
    `speedup_compared` then carries the baseline's noise, not a result."""
    measures: Measures = field(default_factory=Measures)
    """What else the harness measured (spread, compile time, errors, failures, kernels)."""
    confirmed: ConfirmedDesign | None = None
    """Its numbers from the run's latest confirmation round (`search/confirm.py`), when it was
    in one: the run's headline from then on."""
    timing_notes: tuple[str, ...] = ()
    """What the timing saw that bears on trust without deciding the verdict (clusters in one
    program's samples, say), and how long it waited for the timing lock; the agents and `show`
    see them."""

    def compared_text(self, name: str) -> str:
        """`1.23x`, `1.23x (NAME fails correctness)` or `1.23x (NAME baseline unstable)`, `name`
        the compared baseline's (`BaselineNames.compared`): never a bare ratio against a
        baseline that fails the rule every candidate must pass, or whose own timing did not
        settle."""
        if self.speedup_compared is None:
            return "-"
        mark = (f" ({name} fails correctness)" if self.compared_fails else
                f" ({name} baseline unstable)" if self.compared_unstable else "")
        return f"{ratio_text(self.speedup_compared)}x{mark}"

    def compile_text(self) -> str:
        """`compared_text` in the first domain's words (what `agents/analyst.py` still reads)."""
        return self.compared_text("compile")

    def vs_reference(self) -> Standing | None:
        """Where the design stands against the reference by the one rule every view uses (`standing`):
        on its confirmed interval when it was confirmed, else on its paired one; None when not
        timed, or timed without an interval."""
        c = self.confirmed.vs_reference if self.confirmed is not None else None
        if c is not None:
            return standing(c.low, c.high)
        if self.speedup is None:
            return None
        return standing(self.speedup_low, self.speedup_high)

    @property
    def beats_reference(self) -> bool:
        """Faster than the reference by more than the measurement's own interval (the confirmed
        one, when the design was confirmed)."""
        c = self.confirmed.vs_reference if self.confirmed is not None else None
        if c is not None:
            return self.status == "valid" and c.low > 1.0
        low = self.speedup_low if self.speedup_low is not None else self.speedup
        return self.status == "valid" and low is not None and low > 1.0

    def speedup_text(self) -> str:
        """`1.23x [1.20, 1.26]`, the one way a speedup is written."""
        if self.speedup is None:
            return "-"
        if self.speedup_low is None or self.speedup_high is None:
            return f"{ratio_text(self.speedup)}x"
        return f"{ratio_text(self.speedup)}x [{ratio_text(self.speedup_low)}, {ratio_text(self.speedup_high)}]"


@dataclass(frozen=True)
class SearchState:
    """A read-only snapshot of the run the policies decide from."""

    problem: Problem
    designs: tuple[DesignView, ...]
    """Every evaluated design, oldest first."""
    iteration: int
    """The iteration about to run (1-based)."""
    reference_ms: dict[str, float | None] = field(default_factory=dict)
    device: str = "cpu"
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    """dtype name -> {atol, rtol} in force for this problem (the fixed rule)."""
    correctness_mode: str = "fixed"
    """`fixed` (the tolerances above) or `calibrated` (within a factor of the reference's own error
    against a float64 anchor: the admitted precision is measured, not known beforehand)."""
    integrity: str = "lenient"
    """The integrity policy in force (`lenient` | `strict`: the heavy work in the design's own kernels)."""
    environment: dict[str, Any] = field(default_factory=dict)
    """What the harness measured about the machine (device name, versions, instruction sets):
    the reference baseline's, else the latest evaluation's; empty before any."""
    rules: tuple[str, ...] = ()
    """Every rule the harness enforces on a design, one line each, as the agents are told them
    (the domain's `agent_facts`: what a design may contain, the integrity policy, the
    correctness rule, the static checks, each validator); empty when the domain gives none."""
    facts: dict[str, Any] = field(default_factory=dict)
    """The rest of what the domain tells the agents (a command problem: its editable and fixed
    files, background, hints and docs), by name."""

    @property
    def valid(self) -> list[DesignView]:
        """Ranked designs (valid, stable, timed), fastest (highest paired speedup) first."""
        return ranked(self.designs)

    @property
    def best(self) -> DesignView | None:
        v = self.valid
        return v[0] if v else None


Standing = Literal["faster", "within noise", "slower"]


def standing(low: float | None, high: float | None) -> Standing | None:
    """Where a ratio stands against 1.00x, by the one rule every view and prompt uses: `within
    noise` when its 95% interval holds 1.00x (low <= 1 <= high), `faster` above it, `slower`
    below it; None without an interval."""
    if low is None or high is None:
        return None
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "within noise"


def ratio_text(x: float) -> str:
    """A speedup's digits: two decimals below 100 (`1.23`), none above (`123`)."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.2f}"


def ranked(designs: Sequence[DesignView]) -> list[DesignView]:
    """Valid, stably timed designs by paired speedup, highest first (ties: oldest first), the
    designs of a confirmation round first, by their confirmed ratio. Ranking uses the paired
    ratio, not the absolute time: times measured in different workers under different load
    are not comparable; ratios measured side by side are."""
    ok = [d for d in designs if d.status == "valid" and d.speedup is not None]

    def key(d: DesignView) -> tuple[int, float, float, str]:
        # confirmed designs (a confirmation round re-timed the contenders together) first, by
        # their confirmed ratio; the rest were not contenders when it ran
        c = d.confirmed.vs_reference if d.confirmed is not None else None
        if c is not None:
            return (0, -c.ratio, d.created_at, d.id)
        return (1, -(d.speedup or 0.0), d.created_at, d.id)

    return sorted(ok, key=key)


@dataclass(frozen=True)
class Feedback:
    """What an evaluation tells the policy (and an Implementor) about one design."""

    design_id: str
    status: DesignStatus
    report: str
    """`All validators passed.` or every failure, one per line."""
    runtime_ms: float | None = None
    speedup: float | None = None
    reused: bool = False
    """True when the same source had been evaluated before in this run (no new run)."""
    validator: str | None = None
    """The first failing validator (None when nothing failed)."""
    kind: str | None = None
    """Its failure kind (`compile_error`, `runtime_error`, `wrong_output`, `timeout`, ...)."""
    error_tail: str = ""
    """The end of the error output (traceback, or the worker's stderr), for error-fixing prompts."""
    max_abs_err: float | None = None
    """For a wrong output: the largest absolute difference from the reference."""
    max_rel_err: float | None = None
    duplicate_of: str | None = None
    """Set when the design restated one already evaluated or being evaluated in this run (the
    same files, or the same program up to comments, whitespace and local names): that design's
    id, whose verdict this is; nothing was evaluated for it."""


@dataclass(frozen=True)
class Remaining:
    """What is left of each budget (None: that budget has no limit), net of reservations."""

    queries: int | None = None
    tokens: int | None = None
    usd: float | None = None
    gpu_seconds: float | None = None
    wall_seconds: float | None = None


@dataclass
class Reservation:
    """Queries set aside for one phase (`Session.reserve`): `granted` of the `asked`, never
    more than were left. Requests sent inside it (in its task, or in tasks started inside it)
    draw on it as they are admitted (`Meter.admit`), and none past `granted`; while it is open,
    what it has not used is unavailable to the rest."""

    asked: int
    granted: int
    used: int = 0
    released: bool = False

    @property
    def left(self) -> int:
        """Queries of this reservation not used yet (what its phase may still ask)."""
        return max(0, self.granted - self.used)


class Meter(Protocol):
    """One agent call's live account with the run's budgets (`Session.meter`): every request
    of the call asks it first, so no request is sent once a budget is spent, however many
    agents run at once."""

    def admit(self) -> str | None:
        """Before a request (not a transport retry): None, and it is counted at once; or why
        it may not be sent (the budget that is spent)."""
        ...

    def answered(self, tokens: int, usd: float | None) -> None:
        """An answer's tokens and cost (None: unknown), counted at once."""
        ...

    def queries_left(self) -> int | None:
        """Queries the call may still send now (None: no query limit)."""
        ...

    def close(self, requests: int | None = None) -> None:
        """The call ended and its `AgentCall` is recorded next, counting `requests` queries
        (None: every request admitted): its spend is that record's from now on."""
        ...


@dataclass(frozen=True)
class AgentCall:
    """One agent run (one role, one conversation turn with possibly several requests)."""

    role: str
    """`strategist`, `analyst`, `implementor`, `summarizer`."""
    model: str
    prompt_hash: str
    """sha256 of the instructions + user prompt sent."""
    input_tokens: int | None = 0
    """None: unknown (a coding-agent command that reported no usage)."""
    output_tokens: int | None = 0
    """None: unknown, as `input_tokens`."""
    requests: int = 0
    cost_usd: float | None = None
    """None when the model's price is unknown."""
    latency_s: float = 0.0
    retries: int = 0
    """Transport retries (timeouts, 429/5xx) and output retries counted together."""
    ok: bool = True
    error: str | None = None
    messages_json: str = "[]"
    """The whole message history (pydantic-ai's JSON), kept as an artifact."""


@dataclass(frozen=True)
class IterationResult:
    """What one policy iteration produced."""

    plan: Plan | None
    design_ids: tuple[str, ...] = ()
    note: str = ""
    exhausted: bool = False
    """The policy has nothing more to propose (the loop stops)."""
    context_ids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Curation group -> design ids the policy decided from (stored with the iteration)."""


@dataclass(frozen=True)
class Review:
    """The Analyst's verdict on a suspiciously good design."""

    cheating: bool
    reason: str
    failed: bool = False
    """No verdict: the review itself failed (the reason says why); `cheating` is then False."""


class Session(Protocol):
    """The loop's services to a policy during one iteration."""

    async def evaluate(
        self, source: str, *, strategy: str, parents: Sequence[str] = (), author: str = "",
        tags: Mapping[str, Any] | None = None, files: Mapping[str, str] | None = None,
    ) -> Feedback:
        """Store the design (its main file `source`, plus any other `files` of a design made
        of several, and the policy's `tags`, see `tag`), run it through the harness (once per
        distinct set of files), store the verdict; counts against the GPU-seconds budget."""
        ...

    def record_call(self, call: AgentCall) -> None:
        """Store one agent call and count its queries, tokens and money against the budgets."""
        ...

    def meter(self) -> Meter:
        """The meter of an agent call starting now (`Meter`): every model request asks it
        before it is sent, and the call's record follows its `close`."""
        ...

    def budget_left(self) -> str | None:
        """None while every budget has room; else the name of the exhausted one."""
        ...

    def tag(self, design_id: str, **tags: Any) -> None:
        """Attach the policy's own metadata (JSON values) to a stored design: persisted in the
        run database, kept across resume, shown in its DesignView (`tags`)."""
        ...

    def tags(self, design_id: str) -> dict[str, Any]:
        """The tags of a design (empty when it has none)."""
        ...

    def budget_remaining(self) -> Remaining:
        """What is left of every limited budget (queries net of open reservations)."""
        ...

    def probes(self) -> tuple[ProbeMode, ...]:
        """The writers' tools the problem's domain offers (`PROBE_MODES`; none: no tools)."""
        ...

    async def probe(self, mode: ProbeMode, target: str, *, author: str = "") -> str:
        """Run a writer's tool through the harness on `target` (`reference`, a design id or
        prefix, or a design's whole text) and say what it found, as text for the model: a
        failure of the design, the harness or the budget is said, never raised. Each run
        counts in the spend (`Spend.probes`, its worker seconds against `max_gpu_seconds`)."""
        ...

    async def audit(self, design_id: str) -> Verdict | str:
        """Run the red-team audit (the domain's `breach` graph, stronger than the harness) on a
        stored design of the run: its verdict (failed: the design is a breach), or why it did
        not run (the domain has none, a budget is used up, the harness failed). A verdict is
        stored as the design's review (a breach is `flagged`, never ranked). Counted in the
        spend like a writer's tool."""
        ...

    def save_state(self, key: str, value: Any) -> None:
        """Persist the policy's own state (a JSON value) under `key` in the run database, at
        once: a killed run's policy reads it back with `load_state` and resumes where it was."""
        ...

    def load_state(self, key: str) -> Any:
        """The value last saved under `key` (None when nothing was)."""
        ...

    def feedback(self, design_id: str) -> Feedback | None:
        """The feedback of a design already evaluated in this run (None: not evaluated), as
        `evaluate` returned it: a resumed policy rebuilds a fix prompt from it."""
        ...

    def views(self) -> list[DesignView]:
        """Every evaluated design of the run, oldest first, as its verdict arrived: a prompt
        written during an iteration shows what finished since the iteration began."""
        ...

    def reserve(self, queries: int) -> AbstractContextManager[Reservation]:
        """`with session.reserve(n) as r:` sets aside up to n queries for a phase; issuing at
        most `r.granted` queries inside it (in parallel or not) never overshoots `max_queries`."""
        ...

    def set_status(self, worker: str, status: str) -> None:
        """Show what one agent is doing in the live view (`implementor-1`, `attempt 2: evaluating`)."""
        ...


class Policy(Protocol):
    name: str

    async def iterate(self, state: SearchState, session: Session) -> IterationResult:
        """Run one iteration: decide, make designs, evaluate them through `session`."""
        ...

    async def review(self, design: DesignView, state: SearchState, session: Session) -> Review | None:
        """Inspect a design that looks too good to be true before it becomes the best; None when
        the policy has no reviewer."""
        ...
