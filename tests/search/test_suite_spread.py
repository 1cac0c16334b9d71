"""The suite spreads problems over the executor's devices (issue 29, items 4 and 5), shown on
the CPU with fake devices: a local executor whose slots say they are on `cpu:0` and `cpu:1`
(each fake device with its own lock, as each GPU has), two slots each. With three problems
and `--jobs 3`, each problem's evaluations land on the device it was given (two problems on
`cpu:0`, one on `cpu:1`), the two devices work at once, and on one device no timing window
overlaps any window of another evaluation, though two runs share it."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from stratagem.config import load_config
from stratagem.errors import ConfigError
from stratagem.evaluation.executors import LocalExecutor, PinnedExecutor, gpu_slots
from stratagem.evaluation.service import Evaluator
from stratagem.evaluation.slots import make_slots
from stratagem.search import suite as suite_mod
from stratagem.search.suite_manifest import read_manifest
from stratagem.search.suite_problems import find_problems
from stratagem.store.records import EvaluationRecord
from stratagem.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures"
ENV = {"PATH": "/usr/bin:/bin"}
FAST_TOML = """\
[evaluation]
device = "cpu"
cpu_slots = 2
[pytorch]
baselines = ["eager"]
correctness_trials = 2
[pytorch.timing]
warmup_ms = 5
budget_ms = 20
min_reps = 3
max_reps = 30
[search]
iterations = 1
confirm_top = 0
recipes = ["inference_mode"]
"""


def _problem(dim: int) -> str:
    src = (FIXTURES / "paired/problem.py").read_text()
    return src.replace("batch_size = 384", f"batch_size = {dim}").replace("dim = 384", f"dim = {dim}")


class Recording(LocalExecutor):
    """Records each request's device and wall-clock span (`time.time()`)."""

    spans: list[tuple[str, float, float]]

    async def submit(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.time()
        slot, result = await super().submit(*args, **kwargs)
        self.spans.append((slot.physical, t0, time.time()))
        return slot, result


def fake_devices(cfg: Any, k: int) -> Recording:
    """A local executor whose CPU slots are spread over `k` fake devices `cpu:0` ... (each
    with its own lock file, as each GPU of a host has), `cpu_slots` slots on each."""
    base = LocalExecutor.for_devices(["cpu"], cfg, ENV).slots
    slots = []
    for d in range(k):
        for s in base:
            assert s.lock_path is not None
            slots.append(dataclasses.replace(s, index=len(slots), physical=f"cpu:{d}",
                                             lock_path=s.lock_path.with_name(f"fake-cpu{d}.lock")))
    ex = Recording(slots, cfg, ENV)
    ex.spans = []
    return ex


def _windows(ev: EvaluationRecord) -> list[dict[str, Any]]:
    return [w for v in ev.validators for w in ((v.get("details") or {}).get("locks") or [])]


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> float:
    return min(a["released_at"], b["released_at"]) - max(a["acquired_at"], b["acquired_at"])


def test_three_problems_on_two_devices_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATAGEM_CACHE_DIR", str(tmp_path / "cache"))
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "1_tanh_small.py").write_text(_problem(96))
    (problems / "2_tanh_medium.py").write_text(_problem(128))
    (problems / "3_tanh_large.py").write_text(_problem(160))
    (tmp_path / "fast.toml").write_text(FAST_TOML)
    cfg = load_config(tmp_path / "fast.toml")
    ex = fake_devices(cfg.evaluation, 2)
    assert ex.devices() == ["cpu:0", "cpu:1"] and ex.capacity == 4
    suite_dir = tmp_path / "suite"
    suite_mod.new_suite(suite_dir, problems, find_problems(problems), cfg, jobs=3)
    seen: list[tuple[str, str, str | None]] = []
    manifest = asyncio.run(suite_mod.run_suite(
        suite_dir, evaluator=Evaluator(cfg.evaluation, ex),
        on_change=lambda e, _m: seen.append((e.key, e.state, e.device))))
    assert manifest.counts() == {"done": 3}, manifest

    # each problem was given its own device, and every evaluation of its run ran there
    given = {key: dev or "-" for key, state, dev in seen if state == "running"}
    assert sorted(given.values()) == ["cpu:0", "cpu:0", "cpu:1"], seen
    windows: dict[str, list[tuple[str, dict[str, Any]]]] = {"cpu:0": [], "cpu:1": []}
    for entry in read_manifest(suite_dir).problems:
        with RunStore.read(suite_dir / entry.run_dir) as store:
            evs = store.evaluations()
        assert evs and {e.environment["physical_device"] for e in evs} == {given[entry.key]}, entry
        for e in evs:
            ws = _windows(e)
            assert any(w["mode"] == "exclusive" for w in ws), e.validators
            windows[given[entry.key]] += [(f"{entry.key}/{e.id}", w) for w in ws]

    # the two devices worked at once: a request on one (a baseline, a design) ran while a
    # request on the other did
    on = {d: [(t0, t1) for p, t0, t1 in ex.spans if p == d] for d in ("cpu:0", "cpu:1")}
    assert any(min(a1, b1) > max(a0, b0) for a0, a1 in on["cpu:0"] for b0, b1 in on["cpu:1"]), ex.spans
    # and two requests ran on cpu:0 at once (its two runs' baselines or designs): only its
    # lock kept their timings apart
    assert any(min(a1, b1) > max(a0, b0) for i, (a0, a1) in enumerate(on["cpu:0"])
               for b0, b1 in on["cpu:0"][i + 1:]), ex.spans

    # on one device, an evaluation's timing (exclusive) window overlaps no window of another
    for dev, ws in windows.items():
        for who, x in ws:
            if x["mode"] != "exclusive":
                continue
            for other, y in ws:
                if other != who:
                    assert _overlap(x, y) <= 0, (dev, who, x, other, y)


def test_default_jobs_is_one_per_gpu_slot(tmp_path: Path) -> None:
    cfg = load_config(None, {"evaluation": {"device": "cpu"}}).evaluation
    gpus = LocalExecutor(make_slots(["cuda:0", "cuda:1", "cuda:2"], tmp_path, dict.fromkeys(["cuda:0", "cuda:1",
                                                                                              "cuda:2"], 2), "h"),
                         cfg, ENV)
    assert gpu_slots(gpus) == 6 and suite_mod.default_jobs(gpus) == 6
    cpu = LocalExecutor.for_devices(["cpu"], cfg.model_copy(update={"cpu_slots": 3}), ENV)
    assert gpu_slots(cpu) == 0 and suite_mod.default_jobs(cpu) == 1

    pinned = PinnedExecutor(gpus, "cuda:1")
    assert pinned.devices() == ["cuda:1"] and pinned.capacity == 2 and pinned.host() == "h"
    with pytest.raises(ConfigError, match="cuda:7"):
        PinnedExecutor(gpus, "cuda:7")


def test_runs_take_the_device_with_the_fewest_runs(tmp_path: Path) -> None:
    cfg = load_config(None, {"evaluation": {"device": "cpu"}}).evaluation
    ex = LocalExecutor(make_slots(["cuda:0", "cuda:1"], tmp_path, {}, "h"), cfg, ENV)
    devices = suite_mod._Devices(Evaluator(cfg, ex))  # pyright: ignore[reportPrivateUsage]
    with devices.take() as (ev0, d0), devices.take() as (ev1, d1):
        assert (d0, d1) == ("cuda:0", "cuda:1") and ev0.physical_device == "cuda:0"
        with devices.take() as (ev2, d2):
            assert d2 == "cuda:0" and ev2 is ev0  # one evaluator per device, shared by its runs
        assert ev1.executor.devices() == ["cuda:1"]
    with devices.take() as (_, d):
        assert d == "cuda:0"
    # one device (or workers elsewhere): every run shares the suite's evaluator, unpinned
    one = Evaluator(cfg, LocalExecutor.for_devices(["cpu"], cfg, ENV))
    with suite_mod._Devices(one).take() as (ev, d):  # pyright: ignore[reportPrivateUsage]
        assert ev is one and d is None
