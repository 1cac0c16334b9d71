"""torch.compile's compiles let the shared device lock go on a GPU (issue 28, item 2): tracing
and code generation use no device, so another design may take the lock exclusively to time
meanwhile; an autotuning mode, which times kernels while compiling, keeps it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
import torch

from stratagem.domains.pytorch.worker import device_use
from stratagem.domains.pytorch.worker.device_use import DeviceUse


def _exclusive_free(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _compile_once(use: DeviceUse, lock: Path) -> list[bool]:
    """Run a fresh torch.compile'd function's first call under `use.compiling()`; whether the
    lock was free for an exclusive holder while the backend compiled."""
    seen: list[bool] = []

    def backend(gm, _inputs):
        seen.append(_exclusive_free(lock))
        return gm.forward

    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.relu(x) * 2, backend=backend)
    with use.compiling():
        assert not _exclusive_free(lock)
        out = fn(torch.ones(4))
        assert not _exclusive_free(lock)  # held again once the compile ended
    assert torch.equal(out, torch.full((4,), 2.0))
    return seen


@pytest.fixture(autouse=True)
def _no_autotune_seen(monkeypatch):
    monkeypatch.setitem(device_use._SEEN, "autotune", False)
    yield
    torch._dynamo.reset()


def test_a_compile_lets_the_shared_lock_go_on_a_gpu(tmp_path) -> None:
    lock = tmp_path / "dev.lock"
    use = DeviceUse({"device": "cuda:0", "timing_lock": str(lock)})
    assert _compile_once(use, lock) == [True]
    assert [w.mode for w in use.windows] == ["shared", "shared"]  # the hold, split around the compile


def test_an_autotuning_mode_keeps_the_lock_while_compiling(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(torch, "compile", torch.compile)  # the wrapper is taken off after the test
    device_use.watch_compile_modes()
    assert getattr(torch.compile, "_stratagem_watched", False)
    torch.compile(lambda x: x + 1, mode="max-autotune")  # noted; never called
    assert device_use.autotunes_while_compiling()
    lock = tmp_path / "dev.lock"
    use = DeviceUse({"device": "cuda:0", "timing_lock": str(lock)})
    assert _compile_once(use, lock) == [False]


def test_on_the_cpu_a_compile_keeps_the_lock(tmp_path) -> None:
    """On the CPU device compiling competes with CPU timing: the hold is kept."""
    lock = tmp_path / "dev.lock"
    use = DeviceUse({"device": "cpu", "timing_lock": str(lock)})
    assert _compile_once(use, lock) == [False]
