"""`stratagem run` as a real process: SIGKILL mid-evaluation then `stratagem resume`, and
Ctrl-C (SIGINT) stopping cleanly. Real CPU harness, recipes policy, one cheap recipe."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests/adversarial/problems/linear_relu.py"
CONFIG = """
[evaluation]
device = "cpu"
[pytorch]
baselines = ["eager"]
correctness_trials = 2
[pytorch.timing]
warmup_ms = 5
budget_ms = 1500
min_reps = 3
max_reps = 3000
[search]
recipes = ["inference_mode"]
"""


def rows(db: Path, sql: str) -> list[tuple]:
    try:
        with sqlite3.connect(db) as c:
            return c.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def start(tmp_path: Path, config_extra: str = "", background: bool = False,
          **extra_env: str) -> tuple[subprocess.Popen, Path]:
    """`stratagem run` started, and left running once its first design is recorded (its worker
    is running then); `config_extra` is added to the `[evaluation]` section; `background`: as a
    shell starts a job with `&` (SIGINT ignored)."""
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.replace("[evaluation]\n", "[evaluation]\n" + config_extra, 1))
    run_dir = tmp_path / "run"
    env = {**os.environ, "STRATAGEM_CACHE_DIR": str(tmp_path / "cache"), **extra_env}
    proc = subprocess.Popen([sys.executable, "-m", "stratagem", "run", str(PROBLEM), "--run-dir", str(run_dir),
                             "--config", str(cfg), "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if background else None)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not rows(run_dir / "run.db", "SELECT id FROM designs"):
        time.sleep(0.05)
    time.sleep(0.5)  # the worker is running now (its timing stage alone takes seconds)
    assert rows(run_dir / "run.db", "SELECT id FROM designs"), proc.communicate()
    assert proc.poll() is None, ("the run ended before it could be interrupted", proc.communicate())
    return proc, run_dir


def resume(tmp_path: Path, run_dir: Path) -> dict:
    env = {**os.environ, "STRATAGEM_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "stratagem", "resume", str(run_dir), "--json"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def evaluated_once(db: Path) -> None:
    """The interrupted design was evaluated once after the resume: one design; a second
    evaluation only as the loop's re-timing of a design whose timing stayed unstable (a loaded
    machine), never a repeat of the interrupted one."""
    evs = rows(db, "SELECT design_id, stability FROM evaluations ORDER BY id")
    assert len({d for d, _ in evs}) == 1 and 1 <= len(evs) <= 2, evs
    assert all("unstable" in (stab or "") for _, stab in evs[:-1]), evs


def test_sigkill_mid_evaluation_then_resume(tmp_path):
    proc, run_dir = start(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    db = run_dir / "run.db"
    assert rows(db, "SELECT COUNT(*) FROM evaluations") == [(0,)]
    assert rows(db, "SELECT status FROM iterations") == [("running",)]
    shown = subprocess.run([sys.executable, "-m", "stratagem", "show", str(run_dir), "--json"],
                           capture_output=True, text=True, timeout=120)
    body = json.loads(shown.stdout)  # the database says running; no process holds its lease
    assert body["status"] == "interrupted" and body["stop_reason"].startswith("killed"), body
    out = resume(tmp_path, run_dir)
    # inference_mode is about as fast as eager: it is evaluated and ranked, not necessarily the best
    assert out["fastest"] is not None and out["stop_reason"] == "the policy has nothing more to propose"
    assert rows(db, "SELECT COUNT(*), COUNT(DISTINCT id) FROM designs") == [(1, 1)]
    evaluated_once(db)
    assert [r[0] for r in rows(db, "SELECT status FROM iterations ORDER BY n")] == ["interrupted", "done"]
    assert rows(db, "SELECT status FROM run") == [("finished",)]


@pytest.mark.parametrize(("sig", "background"), [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
                         ids=["ctrl-c", "sigterm", "sigterm-background-job"])
def test_ctrl_c_or_sigterm_stops_cleanly_and_resume_finishes(tmp_path, sig, background):
    """Ctrl-C, and SIGTERM (`kill`, `timeout`) the same way: exit 130 with the resume command
    for the real directory, the run marked interrupted, no worker directories left behind; a
    run a shell started in the background (SIGINT ignored: a nohup'd search, a batch script)
    stops on SIGTERM too."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc, run_dir = start(tmp_path, background=background, TMPDIR=str(tmp))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"stratagem resume {run_dir}" in " ".join(err.split())
    assert not list(tmp.glob("stratagem-*")), list(tmp.iterdir())
    db = run_dir / "run.db"
    assert rows(db, "SELECT status FROM run") == [("interrupted",)]
    assert rows(db, "SELECT status FROM iterations") == [("interrupted",)]
    out = resume(tmp_path, run_dir)
    assert out["fastest"] is not None
    evaluated_once(db)


def test_the_wall_budget_stops_a_coding_agent_in_flight(tmp_path):
    """`--max-wall-seconds` is a deadline for the real process too: a coding agent still at work
    when it ends is killed with its process group and the run finishes at the budget (before,
    the run waited for the agent's own 30-minute limit), leaving no worker directory behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pid_file = tmp_path / "agent.pid"
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG)
    run_dir = tmp_path / "run"
    env = {**os.environ, "STRATAGEM_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(tmp)}
    budget_s = 30
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "stratagem", "run", str(PROBLEM), "--run-dir", str(run_dir),
                           "--config", str(cfg), "--json", "--max-wall-seconds", str(budget_s),
                           "--agent-cmd", f"echo $$ > {pid_file}; exec sleep 600"],
                          env=env, capture_output=True, text=True, timeout=240)
    took = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["stop_reason"].startswith("max_wall_seconds ("), out
    assert took < budget_s + 30, took  # interpreter start, imports and the cleanup around the budget
    assert pid_file.exists(), "the agent never started: the baselines took the whole budget"
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the agent's process is gone
    assert not list(tmp.glob("stratagem-*")), list(tmp.iterdir())
    assert rows(run_dir / "run.db", "SELECT status FROM run") == [("finished",)]
