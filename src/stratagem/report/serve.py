"""Owns `stratagem serve` (and `run --serve`): the report of a run on localhost, live.

`GET /` is the report, rebuilt only when the run has moved on (`/version` changed: a new
design, evaluation, iteration or status); the page polls `/version` and reloads itself when it
changes, so an open browser follows the run. The analyses are left out of the live page
(they refit models on every change; `stratagem report` has them). Standard library only
(`http.server`), bound to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from stratagem.report.html import build_report, version
from stratagem.store.sqlite import RunStore

POLL_MS = 2_000
WAITING = ("<!doctype html><html><head><meta charset=utf-8><title>stratagem</title></head><body>"
           "<p id=stamp>waiting for the run to start in {dir}</p>{js}</body></html>")


class _Page:
    """The page's cache: rebuilt when the run's version changes."""

    def __init__(self, run_dir: Path, analyses: bool) -> None:
        self.run_dir = run_dir
        self.analyses = analyses
        self.lock = threading.Lock()
        self.key: str | None = None
        self.html = ""

    def version(self) -> str:
        if not (self.run_dir / RunStore.DB_NAME).exists():
            return "none"
        return version(self.run_dir)

    def get(self) -> str:
        from stratagem.report.html import LIVE_JS

        with self.lock:
            v = self.version()
            if v == "none":
                return WAITING.format(dir=self.run_dir, js=LIVE_JS % POLL_MS)
            if v != self.key:
                self.html = build_report(self.run_dir, live_ms=POLL_MS, analyses=self.analyses)
                self.key = v
            return self.html


def make_server(run_dir: str | Path, host: str = "127.0.0.1", port: int = 8765,
                analyses: bool = False) -> ThreadingHTTPServer:
    """A server of one run's live report (`port=0`: any free port; see `server_address`)."""
    page = _Page(Path(run_dir), analyses)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            try:
                if self.path.split("?")[0].endswith("/version"):
                    body, kind = page.version().encode(), "text/plain"
                elif self.path.split("?")[0] in ("/", "/index.html", "/report.html"):
                    body, kind = page.get().encode(), "text/html; charset=utf-8"
                else:
                    self.send_error(404)
                    return
            except Exception as e:  # noqa: BLE001 - a page that cannot be built says why
                body, kind = f"cannot build the report: {type(e).__name__}: {e}".encode(), "text/plain"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # quiet: the run's own view owns the terminal
            return

    return ThreadingHTTPServer((host, port), Handler)


def serve_in_background(run_dir: str | Path, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """Start serving in a daemon thread (for `run --serve`); `shutdown()` stops it."""
    server = make_server(run_dir, host, port)
    threading.Thread(target=server.serve_forever, name="stratagem-serve", daemon=True).start()
    return server
