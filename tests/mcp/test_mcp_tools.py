"""`stratagem mcp` through the MCP SDK's own client, in-process: the tools listed with their
output schemas, honest and wrong candidates of both domains evaluated, structured errors for
bad inputs, and a short `recipes` run started, watched to its end, shown, exported, and
another one stopped the way Ctrl-C stops it. Real CPU harness, no LLM."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from stratagem.mcp import server as mcp_server
from stratagem.mcp.server import Progress, build_server

ROOT = Path(__file__).resolve().parents[2]
WINDOW = ROOT / "examples/command/window_sums"
LINEAR = ROOT / "tests/adversarial/problems/linear_relu.py"
FAST_CONFIG = """
[evaluation]
device = "cpu"
[pytorch]
baselines = ["eager"]
correctness_trials = 2
[pytorch.timing]
warmup_ms = 5
budget_ms = 200
min_reps = 3
max_reps = 200
[search]
recipes = ["inference_mode"]
"""
HONEST = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0
'''
WRONG = HONEST.replace("* 2.0", "* 2.01")
TOOLS = {"evaluate", "baseline", "list_runs", "show_run", "show_design", "export_design", "start_run",
         "watch_run", "stop_run"}


@pytest.fixture
def config(tmp_path: Path) -> str:
    p = tmp_path / "fast.toml"
    p.write_text(FAST_CONFIG)
    return str(p)


def with_client(body: Callable[[Client], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        async with Client(build_server()) as client:
            return await body(client)

    return asyncio.run(go())


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    r = await client.call_tool(tool, args)
    body = r.structured_content
    assert body is not None, r.content
    assert r.is_error == (not body["ok"]), body
    return body


def test_every_tool_is_listed_with_an_output_schema() -> None:
    async def body(c: Client) -> Any:
        return (await c.list_tools()).tools

    tools = with_client(body)
    assert {t.name for t in tools} == TOOLS
    for t in tools:
        assert t.output_schema is not None and {"ok", "error"} <= set(t.output_schema["properties"]), t.name
        assert t.description


def test_a_command_problem_honest_and_wrong_designs_with_progress() -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def body(c: Client) -> tuple[dict[str, Any], dict[str, Any]]:
        async def heard(p: float, total: float | None, message: str | None) -> None:
            progress.append((p, total, message))

        fast = await c.call_tool("evaluate", {"problem": str(WINDOW), "candidate": str(WINDOW / "designs/fast"),
                                              "device": "cpu"}, progress_callback=heard)
        wrong = await call(c, "evaluate", problem=str(WINDOW), device="cpu",
                           files={"kernel.c": (WINDOW / "designs/wrong/kernel.c").read_text(),
                                  "flags.txt": ""})
        assert fast.structured_content is not None
        base = await call(c, "baseline", problem=str(WINDOW), device="cpu")
        assert base["baseline"]["status"] == "not_measured" and "beside each design" in base["baseline"]["note"]
        return fast.structured_content, wrong

    fast, wrong = with_client(body)
    assert fast["ok"] and fast["status"] == "valid", fast
    v = fast["verdict"]
    assert v["domain"] == "command" and v["speedup"] > 1 and v["speedup_ci"][0] > 1
    assert {"static_checks", "build", "correctness", "timing"} <= set(v["validators"])
    assert wrong["ok"] and wrong["status"] == "invalid"
    assert [f["validator"] for f in wrong["verdict"]["failures"]] == ["correctness"]
    said = [m for _, _, m in progress]
    assert "evaluate: correctness" in said and "evaluate: timing" in said, said
    assert [p for p, _, _ in progress] == sorted(p for p, _, _ in progress)


def test_a_pytorch_problem_honest_and_wrong_candidates(tmp_path: Path, config: str) -> None:
    honest = tmp_path / "honest.py"
    honest.write_text(HONEST)

    async def body(c: Client) -> tuple[dict[str, Any], dict[str, Any]]:
        good = await call(c, "evaluate", problem=str(LINEAR), candidate=str(honest), config=config,
                          run_dir=str(tmp_path / "evals"))
        bad = await call(c, "evaluate", problem=str(LINEAR), files={"candidate.py": WRONG}, config=config)
        base = await call(c, "baseline", problem=str(LINEAR), config=config)
        assert base["baseline"]["problem"] == "linear_relu" and base["baseline"]["status"] == "valid", base
        assert base["baseline"]["reference_ms"]["eager"] > 0
        return good, bad

    good, bad = with_client(body)
    assert good["status"] == "valid" and good["verdict"]["domain"] == "pytorch", good
    assert good["verdict"]["runtime_ms"] > 0 and good["recorded_in"] == str(tmp_path / "evals")
    assert (tmp_path / "evals/run.db").exists()
    assert bad["status"] == "invalid"
    assert bad["verdict"]["failures"][0]["validator"] == "correctness"


def test_bad_inputs_are_structured_errors_naming_the_argument(tmp_path: Path, config: str) -> None:
    (tmp_path / "empty").mkdir()

    async def body(c: Client) -> dict[str, dict[str, Any]]:
        out = {
            "missing problem": await call(c, "evaluate", problem=str(tmp_path / "nope.py"),
                                          candidate=str(LINEAR)),
            "dir without problem.toml": await call(c, "evaluate", problem=str(tmp_path / "empty"),
                                                   files={"a.c": ""}),
            "no candidate": await call(c, "evaluate", problem=str(LINEAR)),
            "empty candidate": await call(c, "evaluate", problem=str(LINEAR), candidate=""),
            "missing candidate": await call(c, "evaluate", problem=str(LINEAR),
                                            candidate=str(tmp_path / "gone.py")),
            "bad device": await call(c, "evaluate", problem=str(LINEAR), files={"candidate.py": HONEST},
                                     device="gpu9"),
            "bad integrity": await call(c, "evaluate", problem=str(LINEAR), files={"candidate.py": HONEST},
                                        integrity="loose"),
            "escaping file": await call(c, "evaluate", problem=str(WINDOW), files={"../x.c": ""}),
            "unknown run": await call(c, "show_run", run_dir=str(tmp_path / "no-run")),
            "dir without a run": await call(c, "show_run", run_dir=str(tmp_path / "empty")),
            "unknown watch": await call(c, "watch_run", run_dir=str(tmp_path / "no-run")),
            "stop a stranger": await call(c, "stop_run", run_dir=str(tmp_path / "empty")),
            "bad policy": await call(c, "start_run", problem=str(LINEAR), policy="warp-speed",
                                     run_dir=str(tmp_path / "r")),
            "llm policy without a model": await call(c, "start_run", problem=str(LINEAR), policy="auto",
                                                     run_dir=str(tmp_path / "r")),
            "bad iterations": await call(c, "start_run", problem=str(LINEAR), iterations=0,
                                         run_dir=str(tmp_path / "r")),
            "missing config": await call(c, "baseline", problem=str(LINEAR), config=str(tmp_path / "x.toml")),
            "missing root": await call(c, "list_runs", root=str(tmp_path / "nowhere")),
        }
        schema = await c.call_tool("watch_run", {"run_dir": str(tmp_path), "wait_s": -1})
        assert schema.is_error  # the SDK's own check of the argument schema
        return out

    got = with_client(body)
    expect = {
        "missing problem": ("invalid_input", "problem", "does not exist"),
        "dir without problem.toml": ("invalid_input", "problem", "problem.toml"),
        "no candidate": ("invalid_input", "candidate", "either candidate"),
        "empty candidate": ("invalid_input", "candidate", "give a path"),
        "missing candidate": ("invalid_input", "candidate", "does not exist"),
        "bad device": ("invalid_input", "device", "gpu9"),
        "bad integrity": ("invalid_input", "integrity", "lenient"),
        "escaping file": ("invalid_input", "files", "../x.c"),
        "unknown run": ("not_found", "run_dir", "not a directory"),
        "dir without a run": ("not_found", "run_dir", "holds no run database"),
        "unknown watch": ("not_found", "run_dir", "not a directory"),
        "stop a stranger": ("not_found", "run_dir", "not a run this server started"),
        "bad policy": ("invalid_input", "policy", "warp-speed"),
        "llm policy without a model": ("invalid_input", "policy", "model"),
        "bad iterations": ("invalid_input", "iterations", "iterations"),
        "missing config": ("invalid_input", "config", "x.toml"),
        "missing root": ("not_found", "root", "nowhere"),
    }
    for case, (kind, argument, words) in expect.items():
        err = got[case]["error"]
        assert not got[case]["ok"] and err["kind"] == kind and err["argument"] == argument, (case, err)
        assert words in err["message"], (case, err)
        assert "Traceback" not in err["message"]
    assert not (tmp_path / "r").exists()  # refused before the run directory was made


def test_a_recipes_run_started_watched_shown_and_exported(tmp_path: Path, config: str) -> None:
    run_dir = tmp_path / "runs" / "r1"
    progress: list[tuple[float, float | None, str | None]] = []

    async def body(c: Client) -> dict[str, Any]:
        async def heard(p: float, total: float | None, message: str | None) -> None:
            progress.append((p, total, message))

        started = await call(c, "start_run", problem=str(LINEAR), config=config, iterations=1,
                             run_dir=str(run_dir))
        assert started["run_dir"] == str(run_dir) and started["process"]["alive"]
        w = await c.call_tool("watch_run", {"run_dir": str(run_dir), "wait_s": 240}, progress_callback=heard)
        watched = w.structured_content
        assert watched is not None
        listed = await call(c, "list_runs", root=str(tmp_path / "runs"))
        shown = await call(c, "show_run", run_dir=str(run_dir))
        design = await call(c, "show_design", run_dir=str(run_dir), design=shown["run"]["all_designs"][0]["id"][:8])
        exported = await call(c, "export_design", run_dir=str(run_dir), design=design["design"]["id"],
                              out=str(tmp_path / "out/design.py"))
        unknown = await call(c, "show_design", run_dir=str(run_dir), design="zzzz")
        return {"watched": watched, "listed": listed, "shown": shown, "design": design, "exported": exported,
                "unknown": unknown}

    got = with_client(body)
    w = got["watched"]
    assert w["ok"] and w["done"] and w["status"] == "finished", w
    assert w["process"]["exit_code"] == 0 and w["iterations"] == 1 and w["designs"] >= 1
    assert progress and progress[0][2].startswith(("starting", "running"))
    [entry] = got["listed"]["runs"]
    assert entry["run_dir"] == str(run_dir) and entry["status"] == "finished" and entry["policy"] == "recipes"
    assert entry["process"]["exit_code"] == 0
    shown = got["shown"]["run"]
    assert shown["problem"] == "linear_relu" and shown["status"] == "finished" and shown["designs"] >= 1
    d = got["design"]
    assert "ModelNew" in d["files"]["candidate.py"] and d["design"]["author"].startswith("recipe:")
    e = got["exported"]
    assert e["path"] == str(tmp_path / "out/design.py") and e["text"].startswith("# stratagem")
    assert (tmp_path / "out/design.py").read_text() == e["text"]
    assert got["unknown"]["error"]["kind"] == "not_found" and got["unknown"]["error"]["argument"] == "design"


def test_stop_run_interrupts_a_run_the_way_ctrl_c_does(tmp_path: Path) -> None:
    slow = tmp_path / "slow.toml"
    slow.write_text(FAST_CONFIG.replace("budget_ms = 200", "budget_ms = 3000").replace("max_reps = 200",
                                                                                     "max_reps = 100000"))
    run_dir = tmp_path / "r"

    async def body(c: Client) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a server started in a shell's background
        try:  # the run must hear Ctrl-C all the same
            await call(c, "start_run", problem=str(LINEAR), config=str(slow), iterations=3, run_dir=str(run_dir))
        finally:
            signal.signal(signal.SIGINT, ignored)
        for _ in range(600):  # until the run is under way (its baselines are being measured)
            w = await call(c, "watch_run", run_dir=str(run_dir))
            if w["status"] != "starting":
                break
            await asyncio.sleep(0.1)
        assert w["status"] == "running" and not w["done"], w
        await asyncio.sleep(1)
        heard: list[str | None] = []

        async def note(_p: float, _t: float | None, message: str | None) -> None:
            heard.append(message)

        r = await c.call_tool("stop_run", {"run_dir": str(run_dir), "grace_s": 60}, progress_callback=note)
        stopped = r.structured_content
        assert stopped is not None and any("sent SIGINT" in (m or "") for m in heard), heard
        again = await call(c, "stop_run", run_dir=str(run_dir))
        watched = await call(c, "watch_run", run_dir=str(run_dir))
        return stopped, again, watched

    stopped, again, watched = with_client(body)
    assert stopped["signalled"] and stopped["status"] == "interrupted", stopped
    assert stopped["process"]["exit_code"] == 130, stopped["process"]["log_tail"]
    assert "stratagem resume" in " ".join(stopped["process"]["log_tail"].split())
    assert not again["signalled"] and again["status"] == "interrupted"
    assert watched["done"] and watched["status"] == "interrupted"


def test_a_calls_progress_pump_ends_with_the_call_even_when_a_send_eats_its_cancellation(monkeypatch) -> None:
    """The heartbeat task of a tool call stops when the call's work ends, also when the send it
    was in swallowed the cancellation: a pump left running sent heartbeats after the call and
    kept `asyncio.run` from closing (a suite run timed out there)."""
    monkeypatch.setattr(mcp_server, "HEARTBEAT_S", 0.02)
    sent: list[str] = []

    class EatingCtx:
        eat = True

        async def report_progress(self, n: float, total: float | None, message: str) -> None:
            sent.append(message)
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                if not self.eat:
                    raise

    async def go() -> tuple[int, int, int]:
        ctx = EatingCtx()
        progress = Progress(ctx, "evaluate")  # type: ignore[arg-type]

        async def work() -> int:
            await asyncio.sleep(0.2)  # heartbeats while it works
            return 7

        assert await progress.around(work) == 7
        at_end = len(sent)
        await asyncio.sleep(0.3)
        alive = len(asyncio.all_tasks())
        ctx.eat = False  # let the old code's pump end, so the loop can close
        return at_end, len(sent), alive

    at_end, later, alive = asyncio.run(go())
    assert at_end >= 2, "heartbeats were sent while the work ran"
    assert later == at_end and alive == 1, (at_end, later, alive)
