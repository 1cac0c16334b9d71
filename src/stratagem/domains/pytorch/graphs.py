"""Owns the PyTorch domain's validator graphs: the default one (`static_checks -> load ->
correctness -> {integrity, shapes} -> timing -> roofline`, `provenance` after timing under the
strict policy), narrowed by a problem's own declaration, and the graphs of a baseline, a
calibration, an audit, a confirmation block, the writers' tools (`PROBE_GRAPHS`) and the
red-team audit of an accepted design (`BREACH_GRAPH`, `breach_graph`).
"""

from __future__ import annotations

from typing import Literal

from stratagem.core.graph import GraphError, ValidatorGraph, ValidatorSpec
from stratagem.core.problem import Problem
from stratagem.errors import ProblemError

IntegrityPolicy = Literal["lenient", "strict"]
"""The `[pytorch] integrity` policy (here, not in `settings.py`, so the worker's roofline,
which reads the floor's calibration version, loads no pydantic)."""

DEFAULT_GRAPH: tuple[ValidatorSpec, ...] = (
    ValidatorSpec("static_checks", (), "parent"),
    ValidatorSpec("load", ("static_checks",), "worker"),
    ValidatorSpec("correctness", ("load",), "worker"),
    ValidatorSpec("integrity", ("correctness",), "worker"),
    ValidatorSpec("shapes", ("correctness",), "worker"),
    ValidatorSpec("timing", ("integrity", "shapes"), "worker"),
    ValidatorSpec("roofline", ("timing",), "parent"),
)

CALIBRATE_GRAPH: tuple[ValidatorSpec, ...] = (ValidatorSpec("calibrate", (), "worker"),)

AUDIT_GRAPH: tuple[ValidatorSpec, ...] = (
    ValidatorSpec("load", (), "worker"),
    ValidatorSpec("audit", ("load",), "worker"),
)

BASELINE_GRAPH: tuple[ValidatorSpec, ...] = (
    ValidatorSpec("load", (), "worker"),
    ValidatorSpec("baseline", ("load",), "worker"),
)

CONFIRM_GRAPH: tuple[ValidatorSpec, ...] = (
    ValidatorSpec("load", (), "worker"),
    ValidatorSpec("confirm", ("load",), "worker"),
)
"""One block of a confirmation round: eager, torch.compile and designs timed in one process."""

PROBE_GRAPHS: dict[str, tuple[ValidatorSpec, ...]] = {
    "check": (
        ValidatorSpec("static_checks", (), "parent"),
        ValidatorSpec("load", ("static_checks",), "worker"),
        ValidatorSpec("correctness", ("load",), "worker"),
        ValidatorSpec("shapes", ("correctness",), "worker"),
    ),
    "profile": (
        ValidatorSpec("static_checks", (), "parent"),
        ValidatorSpec("load", ("static_checks",), "worker"),
        ValidatorSpec("profile", ("load",), "worker"),
        ValidatorSpec("kernels", ("profile",), "parent"),
    ),
}
"""The writers' tools (`agents/tools.py`), run by the evaluator as any graph: `check` builds the
design and compares it with the reference (the correctness trials, the odd and aligned sizes),
with no integrity stage and no timing; `profile` loads it and profiles one warm call (GPU: its
kernels; CPU: torch's operators), each row then set beside the device's peaks in the parent
(`kernels`: `kernel_roofline.py`). Neither is a verdict."""


BREACH_GRAPH: tuple[ValidatorSpec, ...] = (
    ValidatorSpec("load", (), "worker"),
    ValidatorSpec("breach_audit", ("load",), "worker"),
    ValidatorSpec("provenance", ("breach_audit",), "worker"),
)
"""The red-team audit of a design the harness accepted (issue 46, `worker/redteam/audit.py`):
checks stronger than the harness's (fresh sizes, more anchored trials, other input
distributions, outputs compared late and after the next call, other timing protocols), then,
under the strict policy, the runtime `provenance` stage after every call of the audit (it needs
only `load`: its measured calls make their own inputs). A failed stage is a breach.
`breach_graph` drops `provenance` under the lenient policy, which does not require own kernels."""


def breach_graph(policy: IntegrityPolicy = "strict") -> ValidatorGraph:
    """The breach audit's graph for a design accepted under `policy` (`BREACH_GRAPH`, without
    `provenance` under the lenient policy)."""
    specs = BREACH_GRAPH if policy == "strict" else tuple(s for s in BREACH_GRAPH if s.name != "provenance")
    return ValidatorGraph.of(specs)


STRICT_EXTRA = ValidatorSpec("provenance", ("timing",), "worker")
"""The strict policy's runtime check: after timing, so its measured calls come after the timed
ones (a candidate honest only in its first calls fails it)."""


def validator_graph(problem: Problem, policy: IntegrityPolicy = "lenient") -> ValidatorGraph:
    """The problem's graph: the domain default (plus `provenance` under the strict policy),
    narrowed by the problem's own declaration."""
    wanted = problem.settings.get("validators")
    specs = DEFAULT_GRAPH
    if policy == "strict":
        at = [s.name for s in DEFAULT_GRAPH].index("timing") + 1
        specs = (*DEFAULT_GRAPH[:at], STRICT_EXTRA, *DEFAULT_GRAPH[at:])
    if wanted is not None:
        names = {s.name for s in DEFAULT_GRAPH}
        unknown = sorted(set(wanted) - names)
        if unknown:
            raise ProblemError(f"{problem.name}: unknown validators {unknown}; known: {sorted(names)}")
        specs = tuple(s for s in specs if s.name in wanted)
    try:
        return ValidatorGraph.of(specs)
    except GraphError as e:
        raise ProblemError(f"{problem.name}: validators {list(wanted or [])}: {e}") from e


