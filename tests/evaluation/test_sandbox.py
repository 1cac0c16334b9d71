"""The sandbox, through real workers on the CPU: timeouts kill whole process trees, nothing
outlives a run, the environment is scrubbed, the network is unreachable, the response size is
capped, and the temporary directory is removed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import socket
import time
import uuid
from pathlib import Path

import pytest

from stratagem.config import environment
from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.evaluation import sandbox
from stratagem.evaluation.isolation import MARKER_VAR, build_env, scrub_environment
from stratagem.evaluation.outcome import interpret
from stratagem.evaluation.sandbox import SandboxSettings, run_worker

# -- scrub_environment and build_env (no worker) -------------------------------------------


def test_scrub_environment_keeps_allowlist_and_drops_secrets() -> None:
    env = {
        # allowlisted, harmless: kept
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "CUDA_HOME": "/usr/local/cuda",
        "TRITON_CACHE_DIR": "/x/triton",
        "OMP_NUM_THREADS": "4",
        "VIRTUAL_ENV": "/venv",
        # secrets by name, including under allowlisted names and prefixes: dropped
        "OPENAI_API_KEY": "sk-1",
        "ANTHROPIC_API_KEY": "sk-2",
        "GITHUB_TOKEN": "ghp",
        "MY_SECRET": "s",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "CUDA_TOKEN": "t",
        "NVIDIA_API_KEY": "n",
        "TRITON_AUTH_HEADER": "a",
        "LC_PASSWORD": "p",
        "TORCHINDUCTOR_SESSION": "s",
        "CUDA_private_key": "lowercase too",
        # not allowlisted, whatever the name: dropped
        "HOME": "/root",
        "PYTHONPATH": "/evil",
        "LD_PRELOAD": "/evil.so",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "UNRELATED": "x",
    }
    from stratagem.domains import get_domain

    out = scrub_environment(env, get_domain("pytorch").worker.keep_env)  # PyTorch's worker adds TRITON_* & co.
    assert out == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "CUDA_HOME": "/usr/local/cuda",
        "TRITON_CACHE_DIR": "/x/triton",
        "OMP_NUM_THREADS": "4",
        "VIRTUAL_ENV": "/venv",
    }


def test_build_env_pins_home_tmpdir_marker_and_slot(tmp_path: Path) -> None:
    settings = SandboxSettings(
        timeout_s=1,
        base_env={"CUDA_VISIBLE_DEVICES": "0,1", "GITHUB_TOKEN": "x", "HOME": "/root", "TMPDIR": "/tmp"},
        slot_env={"CUDA_VISIBLE_DEVICES": "", "TORCH_EXTENSIONS_DIR": "/c/ext"},
    )
    env = build_env(settings, tmp_path, "m123")
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)
    assert env[MARKER_VAR] == "m123"
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # the slot wins over the parent
    assert env["TORCH_EXTENSIONS_DIR"] == "/c/ext"
    assert env["PATH"] == os.defpath  # no PATH in the base: a default one
    assert env["PYTHONNOUSERSITE"] == "1"
    assert "GITHUB_TOKEN" not in env


# -- helpers -------------------------------------------------------------------------------


def _worker_request(problem, source: str, cfg):
    specs = [s for s in domain.validator_graph(problem).specs if s.placement == "worker"]
    return specs, domain.build_request(problem, candidate_design(source), specs, cfg)


# -- timeouts kill the whole tree ------------------------------------------------------------


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs the setsid utility")
def test_timeout_kills_children_grandchildren_and_setsid_escapees(evaluate, h, tmp_path: Path, cpu_config) -> None:
    tokens = {name: h.unique_sleep_arg() for name in ("child", "grandchild", "setsid_grandchild", "session_child")}
    report = tmp_path / "pids.json"
    gfile, sgfile = tmp_path / "grand.pid", tmp_path / "sgrand.pid"
    script = (
        f"sleep {tokens['grandchild']} & echo $! > {shlex.quote(str(gfile))}; "
        f"setsid sleep {tokens['setsid_grandchild']} & echo $! > {shlex.quote(str(sgfile))}; wait"
    )
    source = h.make_candidate(
        imports="import json, os, subprocess, time",
        forward=f"""
        if not os.path.exists({str(report)!r}):
            a = subprocess.Popen(["sleep", {tokens['child']!r}])
            b = subprocess.Popen(["sh", "-c", {script!r}])
            c = subprocess.Popen(["sleep", {tokens['session_child']!r}], start_new_session=True)
            deadline = time.time() + 5
            while time.time() < deadline and not all(
                os.path.exists(p) and os.path.getsize(p) > 0 for p in ({str(gfile)!r}, {str(sgfile)!r})
            ):
                time.sleep(0.02)
            with open({str(report)!r}, "w") as fh:
                json.dump({{"child": a.pid, "sh": b.pid, "session_child": c.pid}}, fh)
        while True:
            time.sleep(0.1)
        """,
    )
    try:
        t0 = time.monotonic()
        # The hang is in the first forward call: running, not compiling (no compiler runs),
        # so the run limit cuts it; both limits are 12 s here.
        ev = evaluate(source, timeout_s=12, cfg=cpu_config.model_copy(update={"compile_timeout_s": 12.0}))
        elapsed = time.monotonic() - t0
        assert report.exists(), "the candidate never reached forward before the timeout (machine too slow?)"
        pids = json.loads(report.read_text())
        assert set(pids) == {"child", "sh", "session_child"}

        r = h.results_by_name(ev)
        assert ev.verdict.status == "invalid"
        assert r["load"].outcome == "passed"
        assert r["correctness"].outcome == "failed"
        assert r["correctness"].kind == "timeout"
        assert "12 s run limit" in r["correctness"].reason and "during correctness" in r["correctness"].reason
        assert r["timing"].outcome == "skipped"
        assert ev.sandbox["timed_out"] is True
        # the session child and the setsid grandchild left the group: only the marker finds them
        assert ev.sandbox["strays_killed"] >= 2
        # the limit, plus the process's start (charged to compiling: torch's import, 8 s and more
        # on a loaded 2-core machine) and the kill
        assert elapsed < 12 + 20, f"the timeout was not enforced promptly ({elapsed:.1f} s)"

        survivors = {name: h.live_processes_with(tok) for name, tok in tokens.items()}
        assert survivors == {name: [] for name in tokens}
        sh_state = Path(f"/proc/{pids['sh']}/stat")
        assert not sh_state.exists() or sh_state.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    finally:
        h.kill_leftovers(list(tokens.values()))


# -- nothing outlives a normal run ------------------------------------------------------------


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs the setsid utility")
def test_no_orphans_after_normal_completion(evaluate, h) -> None:
    tokens = {name: h.unique_sleep_arg() for name in ("child", "session_child", "setsid_grandchild")}
    source = h.make_candidate(
        imports=f"""
        import subprocess
        _a = subprocess.Popen(["sleep", {tokens['child']!r}])
        _b = subprocess.Popen(["sleep", {tokens['session_child']!r}], start_new_session=True)
        _c = subprocess.Popen(["sh", "-c", "setsid sleep {tokens['setsid_grandchild']} &"])
        _c.wait()
        """,
    )
    try:
        ev = evaluate(source)
        assert ev.verdict.status == "valid", ev.verdict.report()
        assert ev.sandbox["timed_out"] is False and ev.sandbox["returncode"] == 0
        assert ev.sandbox["strays_killed"] >= 2  # the two that called setsid
        survivors = {name: h.live_processes_with(tok) for name, tok in tokens.items()}
        assert survivors == {name: [] for name in tokens}
    finally:
        h.kill_leftovers(list(tokens.values()))


# -- the environment is scrubbed --------------------------------------------------------------


def test_worker_environment_is_scrubbed_and_home_is_a_private_temp_dir(
    evaluate, h, tmp_path: Path, _isolated_cache: Path
) -> None:
    secrets = {
        name: f"fake-{name.lower()}-{uuid.uuid4().hex}"
        for name in (
            "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN", "MY_SECRET",
            "AWS_SECRET_ACCESS_KEY", "CUDA_TOKEN", "NVIDIA_API_KEY", "HF_TOKEN", "DB_PASSWORD",
        )
    }
    probe = f"probe-{uuid.uuid4().hex}"
    base_env = {**environment(), **secrets, "LC_STRATAGEM_PROBE": probe, "STRATAGEM_UNLISTED": "x"}
    report = tmp_path / "env.json"
    source = h.make_candidate(
        imports=f"""
        import json, os, tempfile
        with open({str(report)!r}, "w") as _fh:
            json.dump({{"env": dict(os.environ), "cwd": os.getcwd(),
                        "gettempdir": tempfile.gettempdir(), "home": os.path.expanduser("~")}}, _fh)
        """,
    )
    ev = evaluate(source, base_env=base_env)
    assert ev.verdict.status == "valid", ev.verdict.report()
    seen = json.loads(report.read_text())
    env = seen["env"]

    leaked = sorted(k for k in secrets if k in env)
    assert leaked == []
    leaked_values = sorted(k for k, v in env.items() if any(s in v for s in secrets.values()))
    assert leaked_values == []
    assert "STRATAGEM_UNLISTED" not in env and "STRATAGEM_CACHE_DIR" not in env
    # the base environment did reach the scrubber: an allowlisted variable passes through
    assert env.get("LC_STRATAGEM_PROBE") == probe
    # slot pinning
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert Path(env["TORCH_EXTENSIONS_DIR"]).is_relative_to(_isolated_cache)
    assert MARKER_VAR in env

    home = Path(env["HOME"])
    assert home.name.startswith("stratagem-")
    assert env["TMPDIR"] == str(home)
    assert Path(seen["cwd"]).resolve() == home.resolve()
    assert Path(seen["gettempdir"]).resolve() == home.resolve()
    assert Path(seen["home"]) == home
    assert not home.exists(), "the sandbox temp dir outlived the run"


# -- the network is unreachable ----------------------------------------------------------------


def test_network_is_unreachable_when_denied(evaluate, h, cpu_config) -> None:
    if sandbox._unshare_prefix() is None:
        pytest.skip("`unshare --net` is not permitted here: the sandbox cannot isolate the network")
    listener = socket.create_server(("127.0.0.1", 0), backlog=8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    source = h.make_candidate(
        imports="import socket\n_PROBED = []",
        forward=f"""
        if not _PROBED:
            _PROBED.append(1)
            s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
            s.sendall(b"hello")
            s.close()
        """,
    )
    try:
        ev = evaluate(source)
        r = h.results_by_name(ev)
        assert ev.sandbox["network_isolated"] is True
        assert ev.verdict.status == "invalid"
        assert r["correctness"].outcome == "failed" and r["correctness"].kind == "exception"
        assert r["correctness"].reason.startswith("ModelNew.forward raised: OSError")
        assert "create_connection" in r["correctness"].details["traceback"]
        assert r["timing"].outcome == "skipped"
        with pytest.raises(BlockingIOError):
            listener.accept()

        # Control: the same candidate with the network allowed does connect, so the failure
        # above is the namespace's doing.
        allowed = evaluate(source, cfg=cpu_config.model_copy(update={"network": "allow"}))
        assert allowed.sandbox["network_isolated"] is False
        assert allowed.verdict.status == "valid", allowed.verdict.report()
        conn, _ = listener.accept()
        conn.close()
    finally:
        listener.close()


# -- the response size cap and the temp dir, through run_worker directly -------------------------


def test_oversized_response_is_refused_and_temp_dir_removed(linear_problem, cpu_config, fixtures, tmp_path) -> None:
    source = (fixtures / "candidates" / "good_addmm.py").read_text()
    specs, req = _worker_request(linear_problem, source, cpu_config)
    root = tmp_path / "sandboxes"
    root.mkdir()
    settings = SandboxSettings(
        timeout_s=60,
        base_env=environment(),
        slot_env={"CUDA_VISIBLE_DEVICES": ""},
        max_response_bytes=1024,
        tmp_root=root,
    )
    sr = asyncio.run(run_worker(req.model_dump_json(), settings))

    assert sr.returncode == 0 and not sr.timed_out, sr.stderr_tail
    assert sr.response_text is None
    assert sr.response_problem is not None and "over the 1024-byte limit" in sr.response_problem
    assert sr.network_isolated is (sandbox._unshare_prefix() is not None)
    # the candidate is honest: every stage passed in the worker's own log
    ends = {e["stage"]: e["result"]["outcome"] for e in sr.progress if e.get("event") == "end"}
    assert ends == {s: "passed" for s in ("load", "correctness", "integrity", "shapes", "timing")}
    assert sr.progress[-1]["event"] == "done"

    out = interpret(specs, sr, req.request_id, 60)
    by = {r.name: r for r in out.results}
    assert by["timing"].outcome == "failed" and by["timing"].kind == "malformed"
    assert "1024-byte limit" in by["timing"].reason
    assert out.environment == {}

    assert list(root.iterdir()) == [], "the sandbox temp dir outlived the run"


# -- cancelling a run kills it -------------------------------------------------------------------


def test_cancelled_run_kills_the_worker_and_cleans_up(linear_problem, cpu_config, h, tmp_path) -> None:
    """Aborting an evaluation (a search shutting down) leaves no worker, child or temp dir."""
    tokens = [h.unique_sleep_arg(), h.unique_sleep_arg()]
    ready = tmp_path / "ready"
    source = h.make_candidate(
        imports="import subprocess, time",
        forward=f"""
        subprocess.Popen(["sleep", {tokens[0]!r}])
        subprocess.Popen(["sleep", {tokens[1]!r}], start_new_session=True)
        open({str(ready)!r}, "w").close()
        while True:
            time.sleep(0.1)
        """,
    )
    _specs, req = _worker_request(linear_problem, source, cpu_config)
    root = tmp_path / "sandboxes"
    root.mkdir()
    settings = SandboxSettings(timeout_s=60, base_env=environment(), slot_env={"CUDA_VISIBLE_DEVICES": ""},
                               tmp_root=root)

    async def go() -> float:
        task = asyncio.create_task(run_worker(req.model_dump_json(), settings))
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.05)
        assert ready.exists(), "the candidate never reached forward"
        assert h.live_processes_with(tokens[0]) and h.live_processes_with(tokens[1])
        assert h.live_processes_with(str(root)), "the worker (its command line names its request) is not running"
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t0

    try:
        took = asyncio.run(go())
        assert took < 5, f"cancellation took {took:.1f} s"
        assert [h.live_processes_with(t) for t in tokens] == [[], []]
        assert h.live_processes_with(str(root)) == [], "the worker survived cancellation"
        assert list(root.iterdir()) == [], "the sandbox temp dir outlived the cancelled run"
    finally:
        h.kill_leftovers(tokens)


def test_worker_dies_with_the_process_that_started_it(tmp_path):
    """A search killed with SIGKILL must not leave its workers running (PR_SET_PDEATHSIG)."""
    import signal as _signal
    import subprocess as _subprocess
    import sys as _sys
    import time as _time

    script = tmp_path / "parent.py"
    script.write_text(
        "import functools, subprocess, sys, time\n"
        "from stratagem.evaluation.sandbox import _preexec\n"
        "p = subprocess.Popen(['sleep', '60'], start_new_session=True,\n"
        "                     preexec_fn=functools.partial(_preexec, None))\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = _subprocess.Popen([_sys.executable, str(script)], stdout=_subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.send_signal(_signal.SIGKILL)
    parent.wait()
    deadline = _time.monotonic() + 5
    while _time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().split()[2] == "Z":  # reaped later by init; already dead
                    break
        except FileNotFoundError:
            break
        _time.sleep(0.05)
    else:
        raise AssertionError(f"worker {child} outlived its parent")


def test_a_cancellation_swallowed_below_is_raised_again() -> None:
    """Ctrl-C cancels the run's main task; when something it awaits eats the CancelledError (as
    3.11's asyncio can, behind a TimeoutError), `reraise_lost_cancel` stops the task anyway; a
    cancellation handled where it was asked for (an expired `asyncio.timeout`) does not count."""
    from stratagem.evaluation.sandbox import reraise_lost_cancel

    async def swallows() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # the bug: the caller's cancellation is lost here
        reraise_lost_cancel()
        return "went on"

    async def main() -> tuple[bool, str]:
        task = asyncio.create_task(swallows())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.01):
                await asyncio.sleep(1)
        reraise_lost_cancel()  # this task's own expired timeout: nothing to raise
        return task.cancelled(), "finished"

    assert asyncio.run(main()) == (True, "finished")
