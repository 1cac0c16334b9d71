"""The live view renders every field a user watches, on a terminal and as plain event lines."""

from __future__ import annotations

import io

from rich.console import Console

from stratagem.report.live import LiveView
from stratagem.search.budget import Spend
from stratagem.search.loop import Progress
from stratagem.search.numbers import Counts


def progress() -> Progress:
    p = Progress(problem="19_ReLU", policy="auto", iteration=2, iterations=10, strategy="refine",
                 workers={"implementor-1": "attempt 2: evaluating", "strategist": "plan: refine"},
                 counts=Counts(designs=7, valid=3, ranked=2, unstable=1, unreviewed=0, busy=0, failed=4), best_speedup=2.5, best_id="abcdef123456", best_text="2.50x [2.40, 2.61]",
                 spend=Spend(queries=12, input_tokens=1000, output_tokens=234, usd=0.42, failed_calls=1))
    p.event("evaluating abcdef1234 (implementor-1)")
    return p


def test_terminal_panel_shows_the_search_state():
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=True, color_system=None)
    console.print(LiveView(console, "eager").render(progress()))
    out = buf.getvalue()
    for text in ("19_ReLU", "policy auto", "iteration 2/10", "strategy refine",
                 "7 designs: 3 valid (1 with unstable timing, not ranked), 4 did not pass",
                 "2.50x [2.40, 2.61] vs eager", "LLM queries 12", "tokens 1,234", "$0.4200", "1 failed agent calls",
                 "implementor-1", "attempt 2: evaluating", "evaluating abcdef1234"):
        assert text in out, text


def test_non_terminal_prints_each_event_once():
    buf = io.StringIO()
    view = LiveView(Console(file=buf, width=120), "eager")
    p = progress()
    with view:
        view.update(p)
        view.update(p)
        p.event("abcdef1234 valid 2.50x")
        view.update(p)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].endswith("abcdef1234 valid 2.50x")
