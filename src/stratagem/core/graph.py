"""Owns the validator graph: a DAG of named validators and the rules for running it.

Every validator that can run does; one whose prerequisites did not all pass is `skipped`
with the reason; all failures come back together. The graph is pure orchestration with no
I/O: `GraphRun` tells a driver what to run next (one inline validator, or a batch destined
for a worker process) and records what came back, so the async parent and the synchronous
worker drive the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from stratagem.core.verdict import ValidatorResult

Placement = Literal["parent", "worker"]


@dataclass(frozen=True)
class ValidatorSpec:
    """One node of the graph."""

    name: str
    """Unique name, e.g. `correctness`."""
    requires: tuple[str, ...] = ()
    """Validators that must pass before this one runs."""
    placement: Placement = "worker"
    """`parent` runs inline in the search process; `worker` runs in the sandboxed worker."""


class GraphError(ValueError):
    """The declared graph is not a DAG over known names."""


@dataclass(frozen=True)
class ValidatorGraph:
    """A validated DAG, its nodes kept in a topological order that respects declaration order."""

    specs: tuple[ValidatorSpec, ...]

    @classmethod
    def of(cls, specs: Iterable[ValidatorSpec]) -> ValidatorGraph:
        specs = tuple(specs)
        names = [s.name for s in specs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise GraphError(f"validator names repeat: {', '.join(dupes)}")
        known = set(names)
        for s in specs:
            missing = [r for r in s.requires if r not in known]
            if missing:
                raise GraphError(f"validator {s.name!r} requires unknown {', '.join(missing)}")
        return cls(specs=_toposort(specs))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs)

    def spec(self, name: str) -> ValidatorSpec:
        for s in self.specs:
            if s.name == name:
                return s
        raise KeyError(name)


def _toposort(specs: Sequence[ValidatorSpec]) -> tuple[ValidatorSpec, ...]:
    done: list[ValidatorSpec] = []
    placed: set[str] = set()
    remaining = list(specs)
    while remaining:
        ready = next((s for s in remaining if all(r in placed for r in s.requires)), None)
        if ready is None:
            cycle = ", ".join(s.name for s in remaining)
            raise GraphError(f"validator graph has a cycle among: {cycle}")
        done.append(ready)
        placed.add(ready.name)
        remaining.remove(ready)
    return tuple(done)


@dataclass(frozen=True)
class Step:
    """What the driver must run next: one inline validator, or a batch for the worker."""

    kind: Literal["inline", "batch"]
    specs: tuple[ValidatorSpec, ...]


class GraphRun:
    """The state of one run through a graph.

    Args:
        graph: the graph to run.
        batch_placement: validators with this placement are handed out as one batch (the
            parent passes `'worker'`); `None` runs everything inline (what the worker does).
    """

    def __init__(self, graph: ValidatorGraph, batch_placement: Placement | None = None) -> None:
        self.graph = graph
        self._batch_placement = batch_placement
        self._results: dict[str, ValidatorResult] = {}

    @property
    def results(self) -> tuple[ValidatorResult, ...]:
        """Results in graph order (only those decided so far)."""
        return tuple(self._results[s.name] for s in self.graph.specs if s.name in self._results)

    def _skip_blocked(self) -> None:
        for s in self.graph.specs:
            if s.name in self._results:
                continue
            blockers = [
                r for r in s.requires if r in self._results and self._results[r].outcome != "passed"
            ]
            if blockers:
                self._results[s.name] = ValidatorResult(
                    name=s.name,
                    outcome="skipped",
                    reason=f"needs {', '.join(blockers)}, which did not pass",
                )

    def next_step(self) -> Step | None:
        """The next thing to run, or `None` when every validator has a result."""
        self._skip_blocked()
        pending = [s for s in self.graph.specs if s.name not in self._results]
        if not pending:
            return None
        passed = {n for n, r in self._results.items() if r.outcome == "passed"}
        for s in pending:
            if s.placement != self._batch_placement and all(r in passed for r in s.requires):
                return Step(kind="inline", specs=(s,))
        batch: list[ValidatorSpec] = []
        in_batch: set[str] = set()
        for s in pending:
            if s.placement == self._batch_placement and all(
                r in passed or r in in_batch for r in s.requires
            ):
                batch.append(s)
                in_batch.add(s.name)
        if batch:
            return Step(kind="batch", specs=tuple(batch))
        raise GraphError("validator graph is stuck: nothing can run")  # unreachable for a DAG

    def record(self, results: Iterable[ValidatorResult] | Mapping[str, ValidatorResult]) -> None:
        items = results.values() if isinstance(results, Mapping) else results
        for r in items:
            if r.name not in self.graph.names:
                raise GraphError(f"result for unknown validator {r.name!r}")
            self._results[r.name] = r

    def record_missing(self, specs: Iterable[ValidatorSpec], reason: str) -> None:
        """Mark validators of a batch that came back without a result as skipped."""
        for s in specs:
            if s.name not in self._results:
                self._results[s.name] = ValidatorResult(name=s.name, outcome="skipped", reason=reason)
