"""Owns the red-team views (`show`, the run's last words, `--json`, the HTML report): a run's attempts by class (caught by which check, breached, honest,
broken, unaudited) as a table and as JSON, and a corpus replay's table (`stratagem redteam`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from stratagem.search.policies.redteam.corpus import Replayed

OUTCOMES = ("caught", "breach", "honest", "broken", "unaudited")


def by_class(attempts: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per declared class: how many attempts ended each way, and the checks that caught them or
    found the breach."""
    out: dict[str, dict[str, Any]] = {}
    for a in attempts:
        row = out.setdefault(str(a.get("exploit") or "undeclared"),
                             {"attempts": 0, **dict.fromkeys(OUTCOMES, 0), "checks": []})
        row["attempts"] += 1
        outcome = str(a.get("outcome"))
        if outcome in OUTCOMES:
            row[outcome] += 1
        check = str(a.get("check") or "")
        if check and outcome in ("caught", "breach") and check not in row["checks"]:
            row["checks"].append(check)
    return out


def to_json(attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"attempts": [dict(a) for a in attempts], "by_class": by_class(attempts),
            "breaches": [str(a.get("fixture")) for a in attempts if a.get("outcome") == "breach"]}


def attempts_table(attempts: Sequence[Mapping[str, Any]]) -> Table:
    t = Table(title="red-team attempts by class", title_justify="left")
    for col in ("class", "attempts", "caught", "breached", "honest", "broken", "unaudited", "caught by / breached at"):
        t.add_column(col, justify="right" if col not in ("class", "caught by / breached at") else "left")
    for name, row in by_class(attempts).items():
        t.add_row(name, str(row["attempts"]), str(row["caught"]),
                  f"[bold red]{row['breach']}[/]" if row["breach"] else "0", str(row["honest"]), str(row["broken"]),
                  str(row["unaudited"]), ", ".join(row["checks"]))
    return t


def breach_lines(attempts: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per breach: its class, the audit's check and evidence, where the fixture is."""
    return [f"breach {str(a.get('design_id'))[:10]} ({a.get('exploit')}): {a.get('check')}: "
            f"{str(a.get('evidence'))[:160]} -> {a.get('fixture')}" for a in attempts if a.get("outcome") == "breach"]


def replay_table(rows: Sequence[Replayed]) -> Table:
    t = Table(title="breach corpus replayed through the harness", title_justify="left")
    for col in ("fixture", "class", "now", "caught by"):
        t.add_column(col)
    for r in rows:
        now = "[green]rejected[/]" if r.held else f"[bold red]{'ACCEPTED' if r.status == 'valid' else r.status}[/]"
        t.add_row(r.name, r.exploit, now, r.caught_by[:120])
    return t
