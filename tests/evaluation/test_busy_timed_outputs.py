"""A timing the busy guard cuts short still records every timed call drawn for the
timed-outputs check (issue 41): a machine too busy to time must not make an honest design look
like one that skipped the check (`harness_tampering: ... recorded no timed call's output`)."""

from __future__ import annotations

import torch

from stratagem.domains.pytorch.settings import TimingConfig
from stratagem.domains.pytorch.worker import timing
from stratagem.worker_api.machine_load import BusyGuard


class _AlwaysBusy(BusyGuard):
    def close(self, also: str | None = None) -> str | None:
        self.windows += 1
        self.void += 1
        self.waited_s += 1.0
        self.seen = ["the timing thread waited for a CPU 90% of the time"]
        return self.seen[0]


def test_drawn_timed_calls_are_recorded_when_the_guard_gives_up(monkeypatch) -> None:
    monkeypatch.setattr(timing, "BusyGuard", _AlwaysBusy)
    cfg = {**TimingConfig().model_dump(), "warmup_ms": 1.0, "budget_ms": 20.0}
    cfg["busy"] = {**cfg["busy"], "wait_s": 2.0, "enabled": True}
    got: dict[int, int] = {}
    w = torch.randn(64, 64)
    with torch.no_grad():
        st = timing.time_paired(lambda x: x @ w, lambda x: x @ w, [[torch.randn(64, 64)]], cfg, "cpu",
                                lambda i: [torch.randn(64, 64)], keep=lambda s, i, out, args: got.__setitem__(s, i),
                                keep_count=3)
    assert st["busy"]["busy"] and st["busy"]["measured"] == 0
    assert len(got) == 3, got
