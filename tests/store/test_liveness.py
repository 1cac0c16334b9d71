"""A run's lease (`store/liveness.py`): held while a store has the run marked `running`, let go
when it is marked otherwise or the store closes; a run marked `running` that nobody holds reads
as `interrupted`, and one from before leases (no `run.lock`) as stored."""

from __future__ import annotations

import os
from pathlib import Path

from stratagem.store.liveness import RUN_LOCK, holder_alive
from stratagem.store.sqlite import RunStore


def _status(run_dir: Path) -> tuple[str, str | None]:
    with RunStore.read(run_dir) as r:
        run = r.run()
        assert run is not None
        return run.status, run.stop_reason


def test_the_lease_follows_the_running_mark(tmp_path: Path) -> None:
    live = RunStore.open(tmp_path)
    live.start_run("p" * 64, "recipes", {})
    assert holder_alive(tmp_path) is True and _status(tmp_path) == ("running", None)
    live.set_run_status("finished", "done")
    assert holder_alive(tmp_path) is False and _status(tmp_path) == ("finished", "done")
    live.set_run_status("running")
    assert holder_alive(tmp_path) is True
    live.close()  # as a killed process's descriptors close: the mark stays, the lease goes
    status, why = _status(tmp_path)
    assert status == "interrupted" and why is not None and f"pid {os.getpid()}" in why


def test_a_run_from_before_leases_reads_as_stored(tmp_path: Path) -> None:
    with RunStore.open(tmp_path) as store:
        store.start_run("p" * 64, "recipes", {})
    (tmp_path / RUN_LOCK).unlink()
    assert holder_alive(tmp_path) is None and _status(tmp_path) == ("running", None)
