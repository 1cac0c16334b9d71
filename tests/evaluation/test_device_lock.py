"""The device lock: shared holders overlap, an exclusive holder excludes everyone, a waiting
exclusive holder is not starved by later shared ones, and a dead holder releases it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from stratagem.evaluation.device_lock import DeviceLock


def _hold(lock: DeviceLock, mode: str, seconds: float, log: list, name: str, started: threading.Event | None = None) -> None:
    if started is not None:
        started.set()
    with lock.hold(mode):  # type: ignore[arg-type]
        log.append((name, "in", time.monotonic()))
        time.sleep(seconds)
        log.append((name, "out", time.monotonic()))


def _window(log: list, name: str) -> tuple[float, float]:
    t_in = next(t for n, e, t in log if n == name and e == "in")
    t_out = next(t for n, e, t in log if n == name and e == "out")
    return t_in, t_out


def test_shared_holders_overlap_and_exclusive_excludes(tmp_path: Path) -> None:
    lock = DeviceLock(str(tmp_path / "gpu.lock"))
    log: list = []
    a = threading.Thread(target=_hold, args=(lock, "shared", 0.4, log, "a"))
    b = threading.Thread(target=_hold, args=(lock, "shared", 0.4, log, "b"))
    a.start(), b.start()
    time.sleep(0.1)
    x = threading.Thread(target=_hold, args=(lock, "exclusive", 0.2, log, "x"))
    x.start()
    for t in (a, b, x):
        t.join(5)
    (a0, a1), (b0, b1), (x0, _x1) = _window(log, "a"), _window(log, "b"), _window(log, "x")
    assert a0 < b1 and b0 < a1  # the shared holds overlapped
    assert x0 >= max(a1, b1)  # the exclusive one waited for both


def test_a_waiting_exclusive_holder_is_not_starved(tmp_path: Path) -> None:
    lock = DeviceLock(str(tmp_path / "cpu.lock"))
    log: list = []
    first = threading.Thread(target=_hold, args=(lock, "shared", 0.5, log, "first"))
    first.start()
    time.sleep(0.1)
    x = threading.Thread(target=_hold, args=(lock, "exclusive", 0.2, log, "x"))
    x.start()
    time.sleep(0.1)  # x is queued now; a later shared request must wait behind it
    late = threading.Thread(target=_hold, args=(lock, "shared", 0.1, log, "late"))
    late.start()
    for t in (first, x, late):
        t.join(5)
    assert _window(log, "x")[0] >= _window(log, "first")[1]
    assert _window(log, "late")[0] >= _window(log, "x")[1]


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "dev.lock"
    code = ("import sys, time; sys.path.insert(0, sys.argv[2]); "
            "from stratagem.evaluation.device_lock import DeviceLock; "
            "cm = DeviceLock(sys.argv[1]).hold('exclusive'); cm.__enter__(); print('held', flush=True); time.sleep(60)")
    src = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), src], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        proc.kill()
        proc.wait(10)
        t0 = time.monotonic()
        with DeviceLock(str(path)).hold("exclusive") as waited:
            assert time.monotonic() - t0 < 5 and waited < 5
    finally:
        proc.kill()
