"""The device lock: shared holders overlap, an exclusive holder excludes everyone, a waiting
exclusive holder is not starved by later shared ones, and a dead holder releases it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from stratagem.worker_api.device_lock import DeviceLock


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
            "from stratagem.worker_api.device_lock import DeviceLock; "
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


def test_an_exclusive_holder_says_who_it_is_while_it_holds(tmp_path: Path) -> None:
    """A waiter can tell on whom it waits; the record goes with the hold, and a shared holder
    (one of many) writes none."""
    lock = DeviceLock(str(tmp_path / "dev.lock"))
    assert lock.holder() is None
    with lock.hold("exclusive", owner={"process": 7, "label": "abc"}):
        h = lock.holder()
        assert h is not None and h["process"] == 7 and h["label"] == "abc" and h["mode"] == "exclusive"
    assert lock.holder() is None
    with lock.hold("shared", owner={"process": 7, "label": "abc"}):
        assert lock.holder() is None


def test_a_waiter_is_told_on_whom_it_waits_and_a_free_lock_says_nothing(tmp_path: Path) -> None:
    import contextlib

    lock = DeviceLock(str(tmp_path / "dev.lock"))
    told: list = []

    @contextlib.contextmanager
    def waiting(holder):  # type: ignore[no-untyped-def]
        told.append(holder)
        yield

    with lock.hold("shared", waiting=waiting):
        pass
    assert told == []  # free: no wait, nothing said
    inside = threading.Event()

    def other() -> None:
        with lock.hold("exclusive", owner={"process": 9, "label": "other"}):
            inside.set()
            time.sleep(0.5)

    t = threading.Thread(target=other)
    t.start()
    inside.wait(5)
    with lock.hold("shared", waiting=waiting) as waited:
        assert waited > 0.2
    t.join(5)
    assert len(told) == 1 and told[0]["label"] == "other"
