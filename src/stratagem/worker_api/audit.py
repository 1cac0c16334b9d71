"""Owns what every domain's red-team audit (a `breach_audit` worker stage) shares: `Check`, one
check's record, and `conclude`, the stage's end from its checks' records. Each check is recorded
as `{"check", "ok", "evidence", "cost_s", ...}` (`ok` False when it found a breach; a check
that could not run or does not apply says `skipped`), with what it saw fire (`fired`: signs a
shortcut ran, which the harness may have neutralized; not a failure). The stage fails on the
first failed check, `<check>: <evidence>`, with that check's failure kind; its details list
every check and everything that fired, which the red-team policy words the outcome by
(`search/policies/redteam/policy.py`). Standard library only: it runs in the worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratagem.worker_api.stages import StageFailure


class Check:
    """One check's record: what it found (`fail`), what it skipped, and its evidence."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ok = True
        self.kind = "wrong_output"
        self.evidence = ""
        self.info: dict[str, Any] = {}
        self.fired: list[str] = []

    def fire(self, evidence: str) -> None:
        """A sign that the design's shortcut fired (not a failure: the harness may have
        neutralized it)."""
        self.fired.append(evidence)

    def fail(self, evidence: str, kind: str = "wrong_output") -> None:
        if self.ok:  # the first failure is the evidence
            self.ok, self.kind, self.evidence = False, kind, evidence

    def skip(self, why: str) -> None:
        """The check could not run here, or does not apply to this problem (said why)."""
        self.info["skipped"] = why

    def to_json(self, cost_s: float) -> dict[str, Any]:
        out = {"check": self.name, "ok": self.ok, "evidence": self.evidence, **self.info,
               "cost_s": round(cost_s, 4), **({"fired": self.fired} if self.fired else {})}
        if not self.ok:
            out["kind"] = self.kind
        return out


def conclude(checks: Sequence[dict[str, Any]], total_s: float) -> dict[str, Any]:
    """The stage's details (every check, the total cost, everything that fired).

    Raises:
        StageFailure: a check failed (the first one's kind and evidence; the others named).
    """
    details = {"checks": list(checks), "total_cost_s": round(total_s, 4),
               "fired": [f"{c['check']}: {e}" for c in checks for e in c.get("fired", ())]}
    failed = [c for c in checks if c["ok"] is False]
    if failed:
        first = failed[0]
        more = f" (also failed: {', '.join(c['check'] for c in failed[1:])})" if failed[1:] else ""
        raise StageFailure(str(first["kind"]), f"{first['check']}: {first['evidence']}{more}", details)
    return details
