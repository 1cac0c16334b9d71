"""Who started a thread or a child process: the integrity stage counts only the candidate's
(`guard.watch_starts`).

torch.compile starts threads of its own while it compiles (Inductor's compile pool, tqdm's
monitor, the pool's timer): a design that compiles inside a checked call is not the one that
left them running. A candidate's own thread is still counted however it is started: directly,
through a library that starts it (a timer of torch's, a logging listener), from a thread of
its own, or below Python (`_thread`). Each case runs in a fresh interpreter, so the watch and
the compile pool start there and nowhere else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CANDIDATE = """
import _thread
import logging.handlers
import queue
import threading
import time

import torch


def plain():
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()


def torch_timer():  # torch's Timer starts its thread from torch's file, on the candidate's call
    from torch._inductor.compile_worker.timer import Timer
    Timer(30, lambda: None).record_call()


def listener():
    logging.handlers.QueueListener(queue.SimpleQueue(), logging.NullHandler()).start()


def chained():  # a thread of the candidate's own starts one more, from torch's file
    def inner():
        from torch._inductor.compile_worker.timer import Timer
        Timer(30, lambda: None).record_call()
    t = threading.Thread(target=inner)
    t.start()
    t.join()


def native():
    _thread.start_new_thread(time.sleep, (30,))
    time.sleep(0.2)


def compiled():  # torch compiles inside the call: its compile pool starts here
    f = torch.compile(lambda x: torch.relu(x) * 2 + 1)
    f(torch.randn(64, 64))


def child():
    import subprocess
    subprocess.Popen(["sleep", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def nothing():
    torch.relu(torch.randn(8))
"""

SCRIPT = """
import importlib.util, json, subprocess, sys, threading
from pathlib import Path
from stratagem.domains.pytorch.worker import guard
from stratagem.domains.pytorch.worker.integrity import child_processes

workdir = Path(sys.argv[1])
go = threading.Event()  # a thread alive before the watch (torch's, the harness's) that starts another later
def older():
    go.wait()
    threading.Thread(target=threading.Event().wait, args=(30,), daemon=True).start()
    subprocess.Popen(["sleep", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    threading.Event().wait(30)
threading.Thread(target=older, daemon=True).start()
guard.watch_starts(workdir)
snap = guard.Snapshot()
spec = importlib.util.spec_from_file_location("candidate", workdir / "candidate.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
import torch
torch.relu(torch.randn(1 << 22))  # torch's own thread pool starts here, as in the harness before the check
before, children = guard.Threads.now(), child_processes()
if sys.argv[2] == "late_child":
    go.set()
    import time; time.sleep(0.3)
elif sys.argv[2] == "compiled_pool":  # as torch.compile does for CUDA inputs: wake its compile sidecar
    import time
    import torch._inductor.compile_fx as cf
    from torch._inductor.async_compile import AsyncCompile
    real = cf.compile_fx
    def waking(*args, **kwargs):
        AsyncCompile.wakeup()
        return real(*args, **kwargs)
    cf.compile_fx = waking
    mod.compiled()
    deadline = time.monotonic() + 60  # the pool's idle timer starts once the sidecar first answers
    while "subproc_worker_timer" not in {t.name for t in threading.enumerate()} and time.monotonic() < deadline:
        time.sleep(0.1)
else:
    getattr(mod, sys.argv[2])()
spawned = [p for p in child_processes() - children if guard.spawned_by_candidate(p)]
print(json.dumps({"left": before.left_by_candidate(), "changes": snap.changes(), "spawned": len(spawned),
                  "new": sorted(t.name for t in threading.enumerate()) }))
for p in child_processes():
    import os; os.kill(p, 9)
"""


def _left(tmp_path: Path, case: str) -> dict:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "candidate.py").write_text(textwrap.dedent(CANDIDATE), encoding="utf-8")
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(work), case], capture_output=True, text=True,
                       timeout=600, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["plain", "torch_timer", "listener", "chained"])
def test_a_thread_the_candidate_started_is_counted(tmp_path: Path, case: str) -> None:
    out = _left(tmp_path, case)
    assert out["left"] is not None and "the candidate left threads running" in out["left"], out
    assert "candidate.py:" in out["left"], out  # where it was started
    assert out["changes"] == []


def test_a_child_process_the_candidate_started_is_counted(tmp_path: Path) -> None:
    assert _left(tmp_path, "child")["spawned"] == 1


def test_a_native_thread_the_candidate_started_is_counted(tmp_path: Path) -> None:
    out = _left(tmp_path, "native")
    assert out["left"] is not None and "native threads" in out["left"], out


def test_the_threads_torch_starts_while_it_compiles_are_not_the_candidates(tmp_path: Path) -> None:
    out = _left(tmp_path, "compiled")
    assert any(n.startswith("ThreadPoolExecutor") for n in out["new"]), out  # the pool did start in the call
    assert out["left"] is None, out


def test_the_compile_sidecar_and_its_threads_are_not_the_candidates(tmp_path: Path) -> None:
    """On a GPU, torch.compile starts Inductor's compile sidecar (a child process), its reader
    thread, and, seconds later when the sidecar first answers, the pool's idle timer: the
    H100 rejected an honest compiled ResNet block for that timer (python 3 -> 4)."""
    out = _left(tmp_path, "compiled_pool")
    assert {"InductorSubproc", "subproc_worker_timer"} <= set(out["new"]), out
    assert out["left"] is None and out["spawned"] == 0, out


def test_a_call_that_starts_nothing_leaves_nothing(tmp_path: Path) -> None:
    assert _left(tmp_path, "nothing")["left"] is None


def test_a_thread_started_by_one_older_than_the_candidate_is_not_the_candidates(tmp_path: Path) -> None:
    """Inductor's compile pool reads its results on a thread, which starts the pool's idle
    timer when a job ends (on a GPU machine the pool's first answer comes seconds after the
    compile that started it): whoever started the reading thread owns the timer."""
    out = _left(tmp_path, "late_child")
    assert len(out["new"]) == 3 and out["left"] is None and out["spawned"] == 0, out


def test_replacing_the_watch_is_tampering(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "candidate.py").write_text("", encoding="utf-8")
    script = SCRIPT.replace("getattr(mod, sys.argv[2])()", "threading.Thread.start = threading.Thread.run")
    p = subprocess.run([sys.executable, "-c", script, str(work), "x"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "threading.Thread.start was replaced" in json.loads(p.stdout.strip().splitlines()[-1])["changes"]
