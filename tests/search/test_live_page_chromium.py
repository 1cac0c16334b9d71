"""The live page in a real headless Chromium (Debian's `chromium`): the page renders the run,
a screenshot is taken and checked, and the open page updates itself after a new design lands.
Driven over the Chrome DevTools Protocol (websocket-client). Skipped, with the reason, where
Chromium is not installed (`.ci/run` installs it when it can)."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from fakes import FakeEvaluator, ScriptedPolicy, src
from test_report_html import fake_run

from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.report.serve import serve_in_background
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
websocket = pytest.importorskip("websocket", reason="websocket-client is not installed (pip install -e '.[dev]')")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: `apt-get install chromium` "
                                "(.ci/run does it where the package is available)")
PROBLEM = Path(__file__).resolve().parents[1] / "fixtures/problem_relu.py"


class Tab:
    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.n = 0

    def call(self, method: str, **params):  # noqa: ANN201
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg.get("result", {})

    def text(self, js: str) -> str:
        return str(self.call("Runtime.evaluate", expression=js, returnByValue=True)["result"].get("value"))


def wait_for(pred, timeout_s: float = 30.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.25)
    return False


def add_design(run: Path, tag: str, ms: float) -> None:
    cfg = load_config(None, {"search": {"iterations": 4, "patience": 10}})
    problem = load_problem(PROBLEM)
    with RunStore.open(run) as store:
        asyncio.run(SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), ScriptedPolicy([[src(tag, ms)]]))).run())  # type: ignore[arg-type]


def test_the_live_page_renders_and_follows_the_run(tmp_path):
    run = fake_run(tmp_path / "r", [[src("a", 0.5)]])
    server = serve_in_background(run, port=0)
    port = 9222 + (int(time.time() * 1000) % 500)
    proc = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             f"--remote-debugging-port={port}", "--remote-allow-origins=*",
                             f"--user-data-dir={tmp_path / 'profile'}",
                             "--window-size=1200,900", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        targets: list = []

        def ready() -> bool:
            try:
                targets[:] = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2).read())
                return any(t.get("type") == "page" for t in targets)
            except OSError:
                return False

        assert wait_for(ready), "chromium did not start"
        tab = Tab(next(t for t in targets if t.get("type") == "page")["webSocketDebuggerUrl"])
        tab.call("Page.enable")
        tab.call("Page.navigate", url=f"http://127.0.0.1:{server.server_address[1]}/")
        assert wait_for(lambda: "1 design:" in tab.text("document.getElementById('stamp') ? "
                                                         "document.getElementById('stamp').innerText : ''"))
        assert "2.00x" in tab.text("document.body.innerText")  # the best, as the leaderboard gives it
        shot = base64.b64decode(tab.call("Page.captureScreenshot", format="png")["data"])
        assert shot[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", shot[16:24])
        assert width >= 800 and height >= 600 and len(shot) > 20_000  # a drawn page, not a blank one
        (tmp_path / "live.png").write_bytes(shot)
        imgs = int(tab.text("document.images.length"))
        loaded = int(tab.text("Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length"))
        assert imgs >= 3 and loaded == imgs  # the embedded figures decode in the browser

        add_design(run, "b", 0.25)  # a new, faster design lands while the page is open
        assert wait_for(lambda: "2 designs:" in tab.text("document.getElementById('stamp') ? "
                                                         "document.getElementById('stamp').innerText : ''"))
        assert "4.00x" in tab.text("document.body.innerText")
    finally:
        proc.kill()
        proc.wait()
        server.shutdown()
