"""A coding agent as the model (issue 30): scripted agent commands (no real agent, no real LLM)
through a real `stratagem run` on the CPU harness, and the usage formats the backend parses."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from stratagem.agents.agent_command import parse_usage
from stratagem.cli import main

ROOT = Path(__file__).resolve().parents[2]
ADV = ROOT / "tests/adversarial"
PROBLEM = ADV / "problems/linear_relu.py"
HONEST = ADV / "honest/addmm_fused.py"
FAST = ('[pytorch]\nbaselines = ["eager"]\ncorrectness_trials = 2\n'
        "[pytorch.timing]\nwarmup_ms = 5\nbudget_ms = 20\nmin_reps = 3\nmax_reps = 30\n"
        "[search]\nconfirm_top = 0\n")


def _script(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    p.chmod(0o755)
    return p


def _run(tmp_path: Path, cmd: str, *extra: str, iterations: int = 1) -> dict:
    cfg = tmp_path / "fast.toml"
    cfg.write_text(FAST, encoding="utf-8")
    code = main(["run", str(PROBLEM), "--model", "test", "--agent-cmd", cmd, "--iterations", str(iterations),
                 "--implementors", "1", "--device", "cpu", "--run-dir", str(tmp_path / "run"), "--config",
                 str(cfg), "--json", *extra])
    assert code == 0
    return {"calls": _calls(tmp_path / "run")}


def _calls(run_dir: Path) -> list[dict]:
    con = sqlite3.connect(run_dir / "run.db")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM agent_calls ORDER BY id")]
    finally:
        con.close()


def _agent_calls(calls: list[dict]) -> list[dict]:
    return [c for c in calls if c["model"].startswith("command:")]


def _running(pid: int) -> bool:
    """Whether `pid` is alive (a zombie no one reaped yet is dead)."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True


def _out(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_an_agent_that_writes_an_honest_candidate(tmp_path, capsys):
    # the agent reads its task, finds the problem and the self-check, and writes candidate.py
    agent = _script(tmp_path, "agent.sh", f"""
test -f TASK.md && test -f check.sh && test -f problem/{PROBLEM.name} || exit 3
grep -q UNOFFICIAL check.sh || exit 4
cat > /dev/null   # the task also comes on stdin
cp {HONEST} candidate.py
""")
    res = _run(tmp_path, f"sh {agent}")
    out = _out(capsys)
    assert out["stop_reason"].startswith("iterations") and out["spend"]["evaluations"] >= 1
    [call] = _agent_calls(res["calls"])
    assert call["role"] == "implementor" and call["ok"] == 1 and call["requests"] == 1, call
    assert call["model"] == "command:sh"
    # no usage reported: unknown price and tokens (NULL, not 0)
    assert call["cost_usd"] is None and call["input_tokens"] is None and call["output_tokens"] is None
    work = tmp_path / "run/work/agents/command"
    [d] = list(work.iterdir())
    assert (d / "candidate.py").read_text() == HONEST.read_text()
    assert "Your design is the file(s) `candidate.py`" in (d / "TASK.md").read_text()
    shown = main(["show", str(tmp_path / "run"), "--json"])
    assert shown == 0
    view = _out(capsys)
    assert view["designs"] == 1
    con = sqlite3.connect(tmp_path / "run/run.db")
    try:
        prov = [json.loads(r[0]) for r in con.execute("SELECT provenance FROM designs")]
    finally:
        con.close()
    assert [p["author"] for p in prov] == ["implementor-1"]


def test_a_hanging_agent_is_killed_with_its_process_group(tmp_path, capsys):
    pidfile = tmp_path / "child.pid"
    agent = _script(tmp_path, "hang.sh", f"sleep 300 &\necho $! > {pidfile}\nwait\n")
    start = time.monotonic()
    res = _run(tmp_path, f"sh {agent}", "--agent-timeout", "2", iterations=2)
    out = _out(capsys)
    calls = _agent_calls(res["calls"])
    assert len(calls) == 2  # the search went on to its second iteration
    assert all(c["ok"] == 0 and c["error"].startswith("timeout:") and 1.5 < c["latency_s"] < 30 for c in calls)
    assert out["spend"]["failed_calls"] >= 2 and out["iterations"] == 2
    assert not _running(int(pidfile.read_text()))  # the agent's own child was killed with it
    assert time.monotonic() - start < 280


def test_an_agent_that_writes_nothing_is_a_failed_call(tmp_path, capsys):
    agent = _script(tmp_path, "idle.sh", "echo 'I looked at it and decided not to change anything'\n")
    res = _run(tmp_path, f"sh {agent}", iterations=2)
    out = _out(capsys)
    calls = _agent_calls(res["calls"])
    assert len(calls) == 2 and all(c["ok"] == 0 and c["error"].startswith("no_output:") for c in calls)
    assert out["spend"]["evaluations"] == 0 and out["iterations"] == 2


def test_an_agent_that_reports_its_usage_is_counted(tmp_path, capsys):
    agent = _script(tmp_path, "usage.sh", f"""cp {HONEST} candidate.py
echo "working..."
echo '{{"usage": {{"input_tokens": 1200, "output_tokens": 300}}, "cost_usd": 0.05}}'
""")
    res = _run(tmp_path, f"sh {agent}")
    out = _out(capsys)
    [call] = _agent_calls(res["calls"])
    assert (call["input_tokens"], call["output_tokens"], call["cost_usd"]) == (1200, 300, 0.05)
    assert out["spend"]["tokens"] >= 1500 and out["spend"]["usd"] >= 0.05


def test_a_failing_agent_and_claude_code_output_in_the_pike_o_policy(tmp_path, capsys):
    # PIKE-O's mutate/crossover and fix roles through the command: the agent fails once
    # (exit 1), then answers as Claude Code's `--output-format json` does
    counter = tmp_path / "n"
    result = {"type": "result", "subtype": "success", "is_error": False, "result": "done",
              "total_cost_usd": 0.25, "usage": {"input_tokens": 10, "cache_read_input_tokens": 90,
                                                "output_tokens": 20}}
    agent = _script(tmp_path, "claude.sh", f"""n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}
if [ "$n" = 0 ]; then echo "boom" >&2; exit 1; fi
cp {HONEST} candidate.py
echo '{json.dumps(result)}'
""")
    cfg = tmp_path / "fast.toml"
    cfg.write_text(FAST, encoding="utf-8")
    # no --model: every PIKE-O role writes code, so the command takes them all
    code = main(["run", str(PROBLEM), "--policy", "pike-o", "--agent-cmd", f"sh {agent}",
                 "--max-queries", "3", "--device", "cpu", "--run-dir", str(tmp_path / "run"), "--config", str(cfg),
                 "--json"])
    out = _out(capsys)
    assert code == 0, out
    calls = _agent_calls(_calls(tmp_path / "run"))
    assert calls and calls[0]["ok"] == 0 and calls[0]["error"].startswith("agent_failed:") and "boom" in calls[0]["error"]
    ok = [c for c in calls if c["ok"]]
    assert ok and (ok[0]["input_tokens"], ok[0]["output_tokens"], ok[0]["cost_usd"]) == (100, 20, 0.25)
    assert {c["role"] for c in calls} <= {"mutate", "crossover", "fix", "optimize"}
    assert out["spend"]["queries"] <= 3


@pytest.mark.parametrize(("stdout", "expected"), [
    ('log\n{"usage": {"input_tokens": 5, "output_tokens": 7}, "cost_usd": 0.1}\n', (5, 7, 0.1, "usage-json")),
    ('{"usage": {"input_tokens": 5}}', (5, None, None, "usage-json")),
    (json.dumps({"type": "result", "total_cost_usd": 1.5, "usage": {"input_tokens": 1, "cache_creation_input_tokens": 2,
                                                                     "cache_read_input_tokens": 3, "output_tokens": 4}},
                indent=2), (6, 4, 1.5, "claude-code")),
    ('{"type":"turn.completed","usage":{"input_tokens":11,"cached_input_tokens":0,"output_tokens":3}}\n',
     (11, 3, None, "usage-json")),
    ("no json here\n{not json}\n", None),
    ('{"message": "hello"}', None),
])
def test_usage_formats(stdout, expected):
    u = parse_usage(stdout)
    assert (None if u is None else (u.input_tokens, u.output_tokens, u.cost_usd, u.format)) == expected


def test_a_command_without_a_model_needs_a_policy_whose_every_role_writes(tmp_path, capsys):
    for extra in (["--policy", "auto"], ["--policy", "pike-b"]):
        assert main(["run", str(PROBLEM), "--agent-cmd", "true", "--run-dir", str(tmp_path / "r"), *extra]) == 2
        assert "--model" in capsys.readouterr().out
    cfg = tmp_path / "roles.toml"  # a command that takes only some of PIKE-O's roles cannot run it alone
    cfg.write_text('[agents.command]\ncmd = "true"\nroles = ["mutate"]\n', encoding="utf-8")
    assert main(["run", str(PROBLEM), "--config", str(cfg), "--run-dir", str(tmp_path / "r")]) == 2
    assert "--model" in capsys.readouterr().out
    assert not (tmp_path / "r").exists()


def test_a_coding_agent_alone_runs_a_search_by_default(tmp_path, capsys):
    agent = _script(tmp_path, "agent.sh", f"cp {HONEST} candidate.py\n")
    cfg = tmp_path / "fast.toml"
    cfg.write_text(FAST, encoding="utf-8")
    code = main(["run", str(PROBLEM), "--agent-cmd", f"sh {agent}", "--max-queries", "1", "--device", "cpu",
                 "--run-dir", str(tmp_path / "run"), "--config", str(cfg), "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code == 0, out
    said = [line for line in captured.err.splitlines() if "--policy pike-o" in line]
    assert len(said) == 1 and said[0].startswith("no --model: the coding agent runs the search alone")
    con = sqlite3.connect(tmp_path / "run" / "run.db")
    try:
        assert con.execute("SELECT policy FROM run").fetchone() == ("pike-o",)
    finally:
        con.close()
    calls = _agent_calls(_calls(tmp_path / "run"))
    assert calls and all(c["model"].startswith("command:") for c in calls)


def test_the_command_config_is_checked():
    from stratagem.config import load_config
    from stratagem.errors import ConfigError

    cfg = load_config(None, {"agents": {"command": {"cmd": "claude -p", "roles": ["implementor"]}}})
    assert cfg.agents.command is not None and cfg.agents.command.timeout_s == 1800
    with pytest.raises(ConfigError, match="agents.command"):
        load_config(None, {"agents": {"command": {"cmd": "x", "roles": ["strategist"]}}})


def test_an_agent_edits_a_command_problems_files(tmp_path, capsys):
    # a command problem (C, built and run by the harness): the design is the editable files
    # the agent leaves; it starts from the reference in problem/ and writes the fast kernel
    sys.path.insert(0, str(ROOT / "tests/domains/command"))
    from command_fixtures import EXAMPLE, make_problem  # pyright: ignore[reportMissingImports]

    problem = make_problem(tmp_path / "window_sums_small")
    agent = _script(tmp_path, "c_agent.sh", f"""test -f problem/problem.toml && test -f problem/reference/kernel.c || exit 3
grep -q kernel.c TASK.md && grep -q flags.txt TASK.md || exit 4
cp {EXAMPLE / "designs/fast/kernel.c"} kernel.c
""")
    code = main(["run", str(problem), "--policy", "pike-o", "--agent-cmd", f"sh {agent}", "--max-queries", "1",
                 "--run-dir", str(tmp_path / "run"), "--json"])
    out = _out(capsys)
    assert code == 0, out
    [call] = _agent_calls(_calls(tmp_path / "run"))
    assert call["ok"] == 1, call
    con = sqlite3.connect(tmp_path / "run/run.db")
    try:
        files = [json.loads(r[0]) for r in con.execute("SELECT files FROM designs")]
        statuses = [r[0] for r in con.execute("SELECT status FROM evaluations")]
    finally:
        con.close()
    assert [sorted(f) for f in files] == [["kernel.c"]]
    assert statuses and statuses[0] in ("valid", "unstable"), statuses


def test_the_design_read_back_keeps_file_names_and_stays_inside(tmp_path):
    import asyncio

    from stratagem.agents.agent_command import CommandWriter, design_text
    from stratagem.agents.writers import WriteRequest
    from stratagem.config import AgentCommandConfig
    from stratagem.core.design import text_files
    from stratagem.domains import load_problem

    sys.path.insert(0, str(ROOT / "tests/domains/command"))
    from command_fixtures import make_problem  # pyright: ignore[reportMissingImports]

    problem = load_problem(make_problem(tmp_path / "window_sums_small"))
    # only the second editable file is written: it keeps its name (not read as the main file)
    writer = CommandWriter(AgentCommandConfig(cmd="echo -O1 > flags.txt"), tmp_path / "work")
    recorded = []
    w = asyncio.run(writer.write(WriteRequest(role="fix", worker="b0/c0", prompt="p", problem=problem,
                                              files={"../escape.c": "x"}, record=recorded.append)))
    assert w.source is not None and text_files(w.source, "kernel.c") == {"flags.txt": "-O1\n"}
    # an emptied file is part of the design (an empty flags file is a valid one; the one-text
    # form gives every file a final line break, as it does for a model's answer)
    writer = CommandWriter(AgentCommandConfig(cmd=": > flags.txt"), tmp_path / "work2")
    w = asyncio.run(writer.write(WriteRequest(role="fix", worker="b0/c0", prompt="p", problem=problem,
                                              files={"kernel.c": "k\n", "flags.txt": "-O3\n"})))
    assert w.source is not None and text_files(w.source, "kernel.c") == {"kernel.c": "k\n", "flags.txt": "\n"}
    assert not (tmp_path / "work" / "escape.c").exists() and recorded[0].ok
    assert design_text({"kernel.c": "k"}, "kernel.c") == "k"
