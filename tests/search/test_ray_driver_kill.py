"""A run on a Ray cluster whose driver (the `stratagem run` process) is killed mid-evaluation
resumes with `stratagem resume` (issue 29, item 3): the cluster (started here with `ray start`,
on the CPU) outlives the driver, the killed driver's runner actors go with it, and the resumed
run evaluates the interrupted design once, with nothing lost and nothing doubled."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_cli_kill import evaluated_once, resume, rows, start  # noqa: E402

RAY = Path(sys.executable).parent / "ray"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_head(tmp_path, monkeypatch):
    """A one-node Ray cluster in its own temporary folder, stopped after the test. Token
    authentication off (Ray's default is on), for the cluster and the drivers this test starts."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    ray = str(RAY) if RAY.exists() else shutil.which("ray")
    if ray is None:
        pytest.skip("the ray command is not installed")
    port = _free_port()
    temp = Path("/tmp") / f"ray-{os.getpid()}-{port}"  # short: Ray's socket paths have a length limit
    env = dict(os.environ)
    subprocess.run([ray, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                    f"--temp-dir={temp}", "--disable-usage-stats"], env=env, check=True, capture_output=True,
                   timeout=120)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.timeout(900)  # a Ray cluster, a killed run and its resume: about 4 minutes on 2 loaded cores
def test_a_killed_driver_on_ray_resumes_without_losing_or_doubling(tmp_path, ray_head):
    extra = f'executor = "ray"\nray_address = "{ray_head}"\nray_actors = 1\n'
    proc, run_dir = start(tmp_path, config_extra=extra)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    db = run_dir / "run.db"
    assert rows(db, "SELECT COUNT(*) FROM evaluations") == [(0,)]
    assert rows(db, "SELECT status FROM iterations") == [("running",)]
    out = resume(tmp_path, run_dir)
    assert out["fastest"] is not None
    assert rows(db, "SELECT COUNT(*), COUNT(DISTINCT id) FROM designs") == [(1, 1)]
    evaluated_once(db)
    hosts = rows(db, "SELECT environment FROM evaluations")
    assert hosts and all('"host"' in h for (h,) in hosts)
    assert rows(db, "SELECT status FROM run") == [("finished",)]
