"""Commands run in a process group of their own, killed at their limit; what they leave behind,
even outside their group, is killed after them."""

from __future__ import annotations

import subprocess
import sys

from stratagem.domains.command.runner import changed_files, execute, write_files

SCRIPT = r"""
import os, sys, time, uuid
from pathlib import Path
from stratagem.domains.command.runner import become_subreaper, execute
if sys.argv[1] == "reaper":
    become_subreaper()
mark = "30.%d" % (uuid.uuid4().int % 10**9)
# a daemon that leaves the command's group and session, then outlives it
ran = execute(f"setsid sleep {mark} > /dev/null 2>&1 & sleep 0.2; echo started", Path('.'), 10)
time.sleep(0.2)
alive = 0
for p in os.listdir('/proc'):
    try:
        if p.isdigit() and open(f'/proc/{p}/cmdline', 'rb').read().split(b'\0')[:2] == [b'sleep', mark.encode()]:
            alive += 1
            os.kill(int(p), 9)
    except OSError:
        pass
print(ran.stdout.strip(), alive)
"""


def test_a_daemon_a_command_leaves_is_killed_after_it() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, "reaper"], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["started", "0"], out.stderr
    # the control: without the subreaper the daemon escapes (and the script kills it itself)
    out = subprocess.run([sys.executable, "-c", SCRIPT, "plain"], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["started", "1"], out.stderr


def test_a_command_is_cut_at_its_limit(tmp_path) -> None:
    ran = execute("sleep 20", tmp_path, 0.3)
    assert ran.timed_out and not ran.ok and ran.wall_ms < 5000
    assert "ran past its 0.3 s limit" in ran.why("the run", 0.3)
    ran = execute("echo out; echo err >&2; exit 3", tmp_path, 5)
    assert ran.returncode == 3 and ran.stdout == "out\n" and ran.why("x", 5) == "x exited with code 3: err"


def test_changed_fixed_files_are_named(tmp_path) -> None:
    write_files(tmp_path, {"a.c": "int a;\n", "sub/b.sh": "true\n"})
    assert changed_files(tmp_path, {"a.c": "int a;\n", "sub/b.sh": "true\n"}) == []
    (tmp_path / "a.c").write_text("int b;\n")
    (tmp_path / "sub/b.sh").unlink()
    (tmp_path / "sub/b.sh").symlink_to(tmp_path / "a.c")
    assert changed_files(tmp_path, {"a.c": "int a;\n", "sub/b.sh": "true\n"}) == ["a.c", "sub/b.sh"]


def test_timing_on_a_gpu_slot_runs_commands_on_its_timing_cores(tmp_path) -> None:
    import json
    import os

    import pytest
    from command_fixtures import make_problem

    from stratagem.config import load_config
    from stratagem.domains import get_domain, load_problem
    from stratagem.domains.command.context import Context

    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux and two cores")
    core = min(os.sched_getaffinity(0))
    problem = load_problem(make_problem(tmp_path / "p"))
    t = get_domain("command").open(problem, load_config(None, {}).evaluation)
    req = t.build_request(None, [s for s in t.validator_graph().specs if s.placement == "worker"]).model_copy(update={"timing_lock": str(tmp_path / "lock"), "timing_cores": [core]})
    ctx = Context(json.loads(req.model_dump_json()), tmp_path / "w", lambda e, x: None)
    before = os.sched_getaffinity(0)
    show = "grep Cpus_allowed_list /proc/self/status"
    with ctx.use.hold("exclusive"):
        inside = execute(show, tmp_path, 5).stdout.split()[-1]
    assert inside == str(core) and os.sched_getaffinity(0) == before
    with ctx.use.hold("shared"):
        assert execute(show, tmp_path, 5).stdout.split()[-1] != str(core)
