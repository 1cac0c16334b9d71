"""A run whose process was SIGKILLed (its database still says `running`) is reported as not
running by `watch_run`, `list_runs` and `show_run`, by the rule `stratagem show` applies
(`store/liveness.py`: the running process's lease on `run.lock`).

The run's process here is a small one that marks its run the way a search does (`start_run`,
then `running`, an iteration opened) and waits: seconds, no evaluation. `stratagem run` itself
SIGKILLed is `tests/search/test_cli_kill.py`'s."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp import Client

from stratagem.mcp.server import build_server

ROOT = Path(__file__).resolve().parents[2]
LINEAR = ROOT / "tests/adversarial/problems/linear_relu.py"
RUNNER = """
import sys, time
from stratagem.domains import load_problem
from stratagem.store.sqlite import RunStore

problem = load_problem(sys.argv[2])
store = RunStore.open(sys.argv[1])
store.add_problem(problem)
store.start_run(problem.id, "recipes", {})
store.set_run_status("running")
store.start_iteration(1, {})
print("running", flush=True)
time.sleep(600)
"""


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    r = await client.call_tool(tool, args)
    body = r.structured_content
    assert body is not None, r.content
    return body


def watch_list_show(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    async def go() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with Client(build_server()) as c:
            return (await call(c, "watch_run", run_dir=str(run_dir)),
                    await call(c, "list_runs", root=str(run_dir.parent)),
                    await call(c, "show_run", run_dir=str(run_dir)))

    return asyncio.run(go())


def test_a_sigkilled_run_is_not_reported_running(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r"
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(run_dir), str(LINEAR)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "running", proc.stderr.read() if proc.stderr else ""
        watched, listed, shown = watch_list_show(run_dir)  # alive: running, as its database says
        assert watched["ok"] and watched["status"] == "running" and not watched["done"], watched
        assert listed["runs"][0]["status"] == "running" and shown["run"]["status"] == "running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    watched, listed, shown = watch_list_show(run_dir)
    assert watched["ok"] and watched["status"] == "interrupted" and watched["done"], watched
    assert f"pid {proc.pid}" in watched["stop_reason"] and "killed" in watched["stop_reason"], watched
    [entry] = listed["runs"]
    assert entry["status"] == "interrupted" and entry["stop_reason"] == watched["stop_reason"], entry
    assert shown["run"]["status"] == "interrupted", shown["run"]  # `stratagem show --json`'s own answer
