"""The leaderboard ranks valid designs only and says which fast ones still await a review."""

from __future__ import annotations

from rich.console import Console

from stratagem.core.search import DesignView
from stratagem.domains import names_of
from stratagem.report.leaderboard import leaderboard


def _text(table) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_unreviewed_designs_are_named_but_not_ranked() -> None:
    views = [
        DesignView(id="a" * 16, source="", status="valid", runtime_ms=0.5, speedup=2.0),
        DesignView(id="b" * 16, source="", status="unreviewed", runtime_ms=0.01, speedup=100.0),
        DesignView(id="c" * 16, source="", status="flagged"),
    ]
    out = _text(leaderboard(views, {"eager": 1.0, "compile": 0.8}, names=names_of("pytorch")))
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == 1 and "aaaaaaaaaa" in rows[0]
    assert "bbbbbbbbbb 100x" in out and "awaiting review" in out
    assert "cccccccccc" not in out
