"""Owns the live terminal view of a running search (rich): iteration, strategy, each agent's
state, each running evaluation's stage, elapsed time and estimate, the designs counted as every
view counts them (`search/numbers.py`), best speedup, LLM queries, tokens, money and device time."""

from __future__ import annotations

import time

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from stratagem.report.leaderboard import spend_line
from stratagem.search.loop import Progress
from stratagem.search.state import names_of


class LiveView:
    """A `RunView` that redraws a small panel; on a non-terminal it prints events as lines."""

    def __init__(self, console: Console, reference: str | None = None) -> None:
        self.console = console
        self.reference = reference
        """The reference as the run's domain names it (None: the default domain's)."""
        self._live: Live | None = None
        self._printed = 0
        self._last: list[str] = []
        self._stages: dict[str, str] = {}

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def update(self, p: Progress) -> None:
        if self._live is not None:
            self._live.update(self.render(p))
            return
        new = [e for e in p.events if e not in self._last]
        for e in new:
            self.console.print(e, highlight=False)
        self._last = list(p.events)
        now = time.time()
        for key, f in p.inflight.items():  # on a pipe: each stage change, once
            if self._stages.get(key) != f.stage:
                self._stages[key] = f.stage
                self.console.print(f"  {f.line(now)}", highlight=False)
        self._stages = {k: v for k, v in self._stages.items() if k in p.inflight}

    def render(self, p: Progress) -> Group:
        ref = self.reference or names_of(None).reference
        best = f"{p.best_text} vs {ref} ({(p.best_id or '')[:10]})" if p.best_id else "-"
        it = f"iteration {p.iteration}" + (f"/{p.iterations}" if p.iterations else "")
        head = Text.from_markup(  # one fact a line, so an 80-column terminal folds none of them
            f"[bold]{escape(p.problem)}[/] · policy {escape(p.policy)} · {it} · strategy {escape(p.strategy or '-')}\n"
            f"{p.counts.text()}\nbest: {best}")
        workers = Table.grid(padding=(0, 2))
        for name, status in sorted(p.workers.items()):
            workers.add_row(name, status)
        return Group(head, Text.from_markup(spend_line(p.spend), style="dim"), workers, _Running(p),
                     Text("\n".join(p.events[-5:]), style="dim"))


class _Running:
    """The evaluations in progress, their elapsed time computed at each redraw (so it ticks
    between the loop's updates)."""

    def __init__(self, p: Progress) -> None:
        self.p = p

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        now = time.time()
        for f in list(self.p.inflight.values()):
            yield Text(f"evaluating {f.line(now)}", style="cyan")
