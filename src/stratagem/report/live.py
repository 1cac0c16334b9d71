"""Owns the live terminal view of a running search (rich): iteration, strategy, each agent's
state, each running evaluation's stage, elapsed time and estimate, the designs counted as every
view counts them (`search/numbers.py`), best speedup, LLM queries, tokens, money and device time.
Where nothing redraws (a log, a pipe), the work in progress as lines (`StageLines`): each stage
when it starts, a line every `HEARTBEAT_S` while it lasts, and its end, so no long stage is
silent; `stage_view` is the same for one evaluation (`eval`, `baseline`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from stratagem.core.inflight import InFlight

if TYPE_CHECKING:  # `eval` draws its stages here: it loads no search loop
    from stratagem.search.budget import Spend
    from stratagem.search.progress import Progress

HEARTBEAT_S = 30.0
"""Where nothing redraws, how often a stage still in progress is said again (with its time)."""


def spend_line(spend: Spend) -> str:
    """A run's spend in one line: the live view's, and `run`'s and `show`'s last lines."""
    usd = f"${spend.usd:.4f}" + (f" ({spend.unpriced_calls} of {spend.calls} agent calls unpriced)"
                                 if spend.unpriced_calls else "")
    failed = f" · [red]{spend.failed_calls} failed agent calls[/]" if spend.failed_calls else ""
    calls = f" in {spend.calls} agent calls" if spend.calls else ""
    tools = f" · tool runs {spend.probes} (check, profile)" if spend.probes else ""
    return (f"LLM queries {spend.queries}{calls} · {spend.tokens_text()} · {usd} · retries {spend.retries}"
            f"{failed} · evaluations {spend.evaluations}{tools} · device {spend.gpu_seconds:.1f} s")


class StageLines:
    """Work in progress as lines: each entry of `entries()` when its stage changes, again every
    `heartbeat_s` while it lasts, and once when it ends (with its time). `poll` runs on every
    update and, between them, on a timer thread while the object is entered."""

    def __init__(self, console: Console, entries: Callable[[], Mapping[str, InFlight]],
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.console, self.entries, self.heartbeat_s = console, entries, heartbeat_s
        self._said: dict[str, tuple[InFlight, str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        now = time.time()
        with self._lock:
            current = dict(self.entries())
            for key, f in current.items():
                last = self._said.get(key)
                if last is None or last[1] != f.stage or now - last[2] >= self.heartbeat_s:
                    self.console.print(f"  {f.line(now)}", highlight=False, soft_wrap=True)
                    self._said[key] = (f, f.stage, now)
            for key in [k for k in self._said if k not in current]:
                f = self._said.pop(key)[0]
                self.console.print(f"  {f.label}: done ({now - f.started:.0f} s)", highlight=False, soft_wrap=True)

    def __enter__(self) -> StageLines:
        def tick() -> None:
            while not self._stop.wait(min(5.0, self.heartbeat_s / 3)):
                self.poll()

        self._thread = threading.Thread(target=tick, name="stratagem-stage-lines", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.poll()


@contextmanager
def stage_view(console: Console, label: str) -> Iterator[Callable[[str], None]]:
    """The progress of one piece of work (`label`): its stages and time on a line redrawn on a
    terminal, as `StageLines` elsewhere. Yields the callback that names each stage."""
    entry = InFlight(label, "starting", time.time())
    entries = {label: entry}

    def on_stage(name: str) -> None:
        entry.stage, entry.stage_since = name, time.time()

    if console.is_terminal:
        with Live(_Lines(entries.values), console=console, refresh_per_second=4, transient=True):
            yield on_stage
        return
    with StageLines(console, lambda: entries) as lines:

        def said(name: str) -> None:  # each stage as it starts, not at the next tick
            on_stage(name)
            lines.poll()

        try:
            yield said
        finally:
            entries.clear()
            lines.poll()


class LiveDisplay:
    """A view that may own a rich `Live` display (on a terminal), stopped when the view exits."""

    _live: Live | None = None

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class LiveView(LiveDisplay):
    """A `RunView` that redraws a small panel; on a non-terminal it prints events as lines."""

    def __init__(self, console: Console, reference: str) -> None:
        self.console = console
        self.reference = reference
        """The reference as the run's domain names it (`BaselineNames.reference`)."""
        self._last: list[str] = []
        self._inflight: Mapping[str, InFlight] = {}
        self._lines = None if console.is_terminal else StageLines(console, lambda: self._inflight)

    def __enter__(self) -> LiveView:
        if self._lines is not None:
            self._lines.__enter__()
        else:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__()
        if self._lines is not None:
            self._lines.__exit__(None, None, None)

    def update(self, p: Progress) -> None:
        if self._live is not None:
            self._live.update(self.render(p))
            return
        new = [e for e in p.events if e not in self._last]
        for e in new:
            self.console.print(e, highlight=False)
        self._last = list(p.events)
        self._inflight = p.inflight
        if self._lines is not None:
            self._lines.poll()

    def render(self, p: Progress) -> Group:
        ref = self.reference
        best = f"{p.best_text} vs {ref} ({(p.best_id or '')[:10]})" if p.best_id else "-"
        it = f"iteration {p.iteration}" + (f"/{p.iterations}" if p.iterations else "")
        head = Text.from_markup(  # one fact a line, so an 80-column terminal folds none of them
            f"[bold]{escape(p.problem)}[/] · policy {escape(p.policy)} · {it} · strategy {escape(p.strategy or '-')}\n"
            f"{p.counts.text()}\nbest: {best}")
        workers = Table.grid(padding=(0, 2))
        for name, status in sorted(p.workers.items()):
            workers.add_row(name, status)
        return Group(head, Text.from_markup(spend_line(p.spend), style="dim"), workers, _Lines(lambda: p.inflight.values(), "evaluating "),
                     Text("\n".join(p.events[-5:]), style="dim"))


class _Lines:
    """Work in progress, its elapsed time computed at each redraw (so it ticks between updates)."""

    def __init__(self, entries: Callable[[], Iterable[InFlight]], prefix: str = "") -> None:
        self.entries, self.prefix = entries, prefix

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        now = time.time()
        for f in list(self.entries()):
            yield Text(f"{self.prefix}{f.line(now)}", style="cyan")

