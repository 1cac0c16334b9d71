"""`stratagem mcp` as the process a coding agent starts: over stdio (`python -m stratagem
mcp`) and over streamable HTTP on localhost (`--http --port N`), through the SDK's client;
and the command's refusals."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_mcp_tools import FAST_CONFIG, TOOLS, WINDOW

from stratagem.cli import main

ROOT = Path(__file__).resolve().parents[2]
LINEAR = ROOT / "tests/adversarial/problems/linear_relu.py"


def stdio(tmp_path: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "stratagem", "mcp"], cwd=str(tmp_path),
                                 env={"STRATAGEM_CACHE_DIR": os.environ.get("STRATAGEM_CACHE_DIR", str(tmp_path / "cache"))})


def test_over_stdio_tools_honest_and_wrong_candidates_and_errors(tmp_path: Path) -> None:
    async def go() -> dict[str, Any]:
        async with Client(stdio(tmp_path), read_timeout_seconds=300) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            honest = await c.call_tool("evaluate", {"problem": str(WINDOW), "device": "cpu",
                                                    "candidate": str(WINDOW / "designs/fast")})
            wrong = await c.call_tool("evaluate", {"problem": str(WINDOW), "device": "cpu",
                                                   "candidate": str(WINDOW / "designs/wrong")})
            bad = await c.call_tool("evaluate", {"problem": "missing.py", "candidate": "x.py"})
            return {"tools": tools, "honest": honest.structured_content, "wrong": wrong.structured_content,
                    "bad": (bad.is_error, bad.structured_content)}

    got = asyncio.run(go())
    assert got["tools"] == TOOLS
    assert got["honest"]["status"] == "valid" and got["honest"]["verdict"]["speedup"] > 1
    assert got["wrong"]["status"] == "invalid"
    is_error, bad = got["bad"]
    # relative paths are the server's working directory's
    assert is_error and bad["error"]["argument"] == "problem" and str(tmp_path / "missing.py") in bad["error"]["message"]


def test_over_stdio_a_short_recipes_run_started_and_watched(tmp_path: Path) -> None:
    cfg = tmp_path / "fast.toml"
    cfg.write_text(FAST_CONFIG)

    async def go() -> dict[str, Any]:
        async with Client(stdio(tmp_path), read_timeout_seconds=400) as c:
            started = await c.call_tool("start_run", {"problem": str(LINEAR), "config": str(cfg),
                                                      "iterations": 1, "run_dir": "runs/r"})
            watched = await c.call_tool("watch_run", {"run_dir": "runs/r", "wait_s": 300})
            listed = await c.call_tool("list_runs", {})
            return {"started": started.structured_content, "watched": watched.structured_content,
                    "listed": listed.structured_content}

    got = asyncio.run(go())
    assert got["started"]["run_dir"] == str(tmp_path / "runs/r")
    w = got["watched"]
    assert w["done"] and w["status"] == "finished" and w["process"]["exit_code"] == 0, w
    assert [r["run_dir"] for r in got["listed"]["runs"]] == [str(tmp_path / "runs/r")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_over_streamable_http_on_localhost(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "stratagem", "mcp", "--http", "--port", str(port)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.2)

        async def go() -> tuple[set[str], Any]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                tools = {t.name for t in (await c.list_tools()).tools}
                r = await c.call_tool("show_run", {"run_dir": "nowhere"})
                return tools, r

        tools, r = asyncio.run(go())
        assert tools == TOOLS
        assert r.is_error and r.structured_content["error"]["kind"] == "not_found"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_the_http_server_binds_this_machine_only(capsys) -> None:
    assert main(["mcp", "--http", "--host", "0.0.0.0"]) == 2
    assert "this machine only" in capsys.readouterr().err
