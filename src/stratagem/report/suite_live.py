"""Owns the live terminal view of a suite (`stratagem bench` on a terminal): the counts by
state, every running problem (its device, how long it has run, its best design so far), the
latest finished problems with their best speedup, and how many are left. On a non-terminal it
prints a line per change of state instead. With the queue executor, where the suite's queue
stands (`queue_line`: requests waiting since when, claimed, a worker last seen) under the
table, or as a line every `HEARTBEAT_S` while requests wait."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from stratagem.evaluation.queue import QueueDir
from stratagem.evaluation.queue_executor import queue_line
from stratagem.report.live import HEARTBEAT_S, LiveDisplay
from stratagem.report.suite import ProblemRow, row_of
from stratagem.search.suite_manifest import ProblemEntry, SuiteManifest, read_manifest
from stratagem.store.sqlite import RunStore

ENDED = ("done", "failed", "skipped")


class SuiteLiveView(LiveDisplay):
    """`on_change` for `run_suite` that redraws a table (terminal) or prints lines."""

    def __init__(self, console: Console, suite_dir: Path, recent: int = 8, reread_s: float = 5.0) -> None:
        self.console = console
        self.suite_dir = Path(suite_dir)
        self.recent = recent
        self.reread_s = reread_s
        """How often a problem's best so far is read again from its run database."""
        self.manifest: SuiteManifest | None = None
        self._rows: dict[str, tuple[float, ProblemRow | None]] = {}
        self._queue: tuple[QueueDir, float | None] | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> SuiteLiveView:
        self._queue = _suite_queue(self.suite_dir)
        if self.console.is_terminal:
            self._live = Live(console=self.console, refresh_per_second=2, transient=False,
                              get_renderable=self.render)
            self._live.start()
        elif self._queue is not None:
            self._ticker = threading.Thread(target=self._tick, name="stratagem-suite-queue", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        super().__exit__(*exc)

    def queue_text(self) -> str | None:
        """Where the suite's queue stands (None: no queue, or nothing waits there)."""
        return queue_line(self._queue[0], time.time(), self._queue[1]) if self._queue is not None else None

    def _tick(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            if (text := self.queue_text()) is not None:
                self.console.print(f"  {text}", highlight=False, soft_wrap=True)

    def changed(self, entry: ProblemEntry, manifest: SuiteManifest) -> None:
        self.manifest = manifest
        self._rows.pop(entry.key, None)  # read again: its state moved
        if self._live is None:
            self.console.print(line(entry, manifest), highlight=False)

    def render(self) -> Group:
        m = self.manifest
        t = Table(expand=False)
        head = Text(title(m, self.suite_dir))
        for name in ("problem", "state", "device", "time", "best so far", "note"):
            t.add_column(name, no_wrap=name in ("problem", "time"))
        if m is None:
            return Group(head, t)
        running = [e for e in m.problems if e.state == "running"]
        ended = sorted((e for e in m.problems if e.state in (*ENDED, "interrupted")),
                       key=lambda e: e.finished_at or 0.0, reverse=True)[: self.recent]
        now = time.time()
        for e in [*running, *ended]:
            r = self._row(e, now)
            spent = (e.active_s + (now - e.started_at if e.state == "running" and e.started_at else 0.0))
            best = "-" if r is None or r.speedup is None else f"{r.speedup:.2f}x"
            if r is not None and r.speedup is not None and r.low is not None and r.high is not None:
                best += f" [{r.low:.2f}, {r.high:.2f}]"
            t.add_row(escape(e.key), e.state, e.device or "-", f"{spent:.0f} s" if spent else "-", best,
                      escape((e.stop_reason or "")[:60]))
        pending = sum(1 for e in m.problems if e.state == "pending")
        if pending:
            t.add_row(f"... {pending} pending", "", "", "", "", "")
        queued = self.queue_text()
        return Group(head, t, Text(queued, style="yellow")) if queued else Group(head, t)

    def _row(self, e: ProblemEntry, now: float) -> ProblemRow | None:
        """The problem's row, read again every `reread_s` while it runs (None: no run yet)."""
        seen = self._rows.get(e.key)
        if seen is not None and (e.state != "running" or now - seen[0] < self.reread_s):
            return seen[1]
        d = self.suite_dir / e.run_dir
        row = None
        if (d / RunStore.DB_NAME).exists():
            try:
                row = row_of(d, key=e.key, state=e.state)
            except Exception:  # noqa: BLE001 - a database mid-write: shown as unknown, read next time
                row = None
        self._rows[e.key] = (now, row)
        return row


def _suite_queue(suite_dir: Path) -> tuple[QueueDir, float | None] | None:
    """The suite's queue folder and wait bound, when its runs evaluate through a queue."""
    try:
        ev = read_manifest(suite_dir).config.get("evaluation") or {}
    except Exception:  # noqa: BLE001 - no manifest yet: no queue line
        return None
    if ev.get("executor") != "queue" or not ev.get("queue_dir"):
        return None
    bound = ev.get("queue_wait_s")
    return QueueDir(ev["queue_dir"]), float(bound) if isinstance(bound, int | float) else None


def title(m: SuiteManifest | None, suite_dir: Path) -> str:
    if m is None:
        return f"suite {suite_dir}: starting"
    c = m.counts()
    parts = [f"{c[s]} {s}" for s in ("done", "running", "interrupted", "failed", "skipped", "pending") if c.get(s)]
    return f"suite {suite_dir} · {len(m.problems)} problems · " + " · ".join(parts)


def line(entry: ProblemEntry, manifest: SuiteManifest) -> str:
    """One change of state as a line: `[ended/total] key: state on device (why)`."""
    c = manifest.counts()
    ended = sum(c.get(k, 0) for k in ENDED)
    why = f" ({entry.stop_reason})" if entry.stop_reason else ""
    where = f" on {entry.device}" if entry.device and entry.state == "running" else ""
    return f"[{ended}/{len(manifest.problems)}] {entry.key}: {entry.state}{where}{why}"
