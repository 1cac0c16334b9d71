"""Owns the red-team views (`show`, the run's last words, `--json`, the HTML report): a run's
attempts by class (caught by which check, breached, neutralized, never fired, honest, broken,
unaudited) as a table and as JSON, every attempt's outcome in full (`attempt_lines`, the words
the attacker was told), and a corpus replay's table (`stratagem redteam`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from stratagem.search.policies.redteam import OUTCOMES
from stratagem.search.policies.redteam.corpus import Replayed

COLUMNS = {"caught": "caught", "breach": "breached", "neutralized": "neutralized", "never_fired": "never fired",
           "honest": "honest", "broken": "broken", "unaudited": "unaudited"}
"""Each outcome's column heading."""


def by_class(attempts: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per class (the catalog's class each attempt named, else its own name): how many attempts
    ended each way, and the checks that caught them or found the breach."""
    out: dict[str, dict[str, Any]] = {}
    for a in attempts:
        row = out.setdefault(str(a.get("cls") or a.get("exploit") or "undeclared"),
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
    for col in ("class", "attempts", *COLUMNS.values(), "caught by / breached at"):
        t.add_column(col, justify="right" if col not in ("class", "caught by / breached at") else "left")
    for name, row in by_class(attempts).items():
        t.add_row(name, str(row["attempts"]), *(f"[bold red]{row[k]}[/]" if k == "breach" and row[k] else str(row[k])
                                                 for k in COLUMNS), ", ".join(row["checks"]))
    return t


def attempt_lines(attempts: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per attempt, in full: its id and class, what happened (`Outcome.words`, stored
    as `words`), and a breach's fixture."""
    return [f"{str(a.get('design_id'))[:10]} {a.get('exploit')}: {a.get('words') or a.get('outcome')}"
            + (f" -> {a.get('fixture')}" if a.get("fixture") else "") for a in attempts]


def replay_table(rows: Sequence[Replayed]) -> Table:
    t = Table(title="breach corpus replayed through the harness", title_justify="left")
    for col in ("fixture", "class", "now", "caught by"):
        t.add_column(col)
    for r in rows:
        now = "[green]rejected[/]" if r.held else f"[bold red]{'ACCEPTED' if r.status == 'valid' else r.status}[/]"
        t.add_row(r.name, r.exploit, now, r.caught_by)
    return t
