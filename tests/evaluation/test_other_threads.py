"""Work on other threads while timed on the CPU (a red-team class: the tail of the output handed
to a pool and never joined, so `forward` returns early and the ratio is bought with a second
core): the paired timing counts each program's CPU on threads other than the timing thread,
and the timing stage voids a candidate that used more than its thread budget allows."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from stratagem.domains.pytorch.settings import TimingConfig
from stratagem.domains.pytorch.worker import timing
from stratagem.domains.pytorch.worker.timed import other_threads

X = torch.randn(256, 256)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the worker times a CPU design ([pytorch] cpu_threads = 1)
    yield
    torch.set_num_threads(before)


def _work(x: torch.Tensor) -> torch.Tensor:
    return x @ x


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([_work(x), _work(x)])


def honest(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([_work(x), _work(x)])


def offloading(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(2 * x.shape[0], x.shape[1])
    tail = threading.Thread(target=lambda: out[x.shape[0]:].copy_(_work(x)))  # never joined
    tail.start()
    out[: x.shape[0]] = _work(x)
    return out


def _time(candidate: Any) -> dict[str, Any]:
    cfg = {**TimingConfig().model_dump(), "pairs": 8, "budget_ms": 400.0, "target_halfwidth": 0.0}
    cfg["busy"] = {**cfg["busy"], "enabled": False}
    return timing.time_paired(reference, candidate, [[X]], cfg, "cpu", None)


def test_an_honest_design_spends_nothing_elsewhere_and_passes() -> None:
    cores = _time(honest)["other_threads_cores"]
    assert cores["candidate"] < 0.1 and other_threads(cores, 1) is None


def test_work_left_to_another_thread_is_seen_and_rejected() -> None:
    cores = _time(offloading)["other_threads_cores"]
    assert cores["candidate"] > 0.25 > cores["reference"], cores
    why = other_threads(cores, 1)
    assert why is not None and why.startswith("other_threads:") and "after `forward` returned" in why


def test_the_thread_budget_is_the_allowance() -> None:
    # timed on 4 threads, an intra-op pool of 3 more is the design's to use; past it, rejected
    assert other_threads({"candidate": 2.9, "reference": 0.0}, 4) is None
    assert other_threads({"candidate": 3.6, "reference": 0.0}, 4) is not None
    # what the reference's blocks spent elsewhere too (the harness's threads) is not the design's
    assert other_threads({"candidate": 0.4, "reference": 0.3}, 1) is None
