"""The busy guard (issue 41): a timing knows when the machine was too busy to time, voids
those windows, and says `not measured` rather than give a ratio when quiet cannot be had."""

from __future__ import annotations

import subprocess
import sys
import time

from stratagem.core.confirmed import ConfirmedDesign, between_blocks, ranked
from stratagem.core.paired import Ratio, Stability, busy_reason, paired_stability
from stratagem.worker_api.machine_load import BusyGuard, BusyRules, LoadProbe, LoadWindow


def test_a_window_is_busy_when_the_timing_thread_waited_or_the_gpu_was_shared() -> None:
    rules = BusyRules()
    assert LoadWindow(0.05, run_delay_share=0.01, others_cores=0.9).busy(rules) is None
    why = LoadWindow(0.05, run_delay_share=0.4, others_cores=1.6).busy(rules)
    assert why is not None and "waited for a CPU 40%" in why and "1.6" in why
    assert LoadWindow(0.05, steal_share=0.5).busy(rules) is not None
    assert "pid 42" in (LoadWindow(0.05, gpu_others={42: 80.0}).busy(rules) or "")
    # an unknown reading never makes a window busy
    assert LoadWindow(0.05).busy(rules) is None


class _Probe:
    """A scripted probe: each window's reading in turn."""

    def __init__(self, windows: list[LoadWindow]) -> None:
        self.windows = list(windows)

    def start(self) -> None:
        pass

    def stop(self) -> LoadWindow:
        return self.windows.pop(0) if self.windows else LoadWindow(0.05, run_delay_share=0.0)

    def close(self) -> None:
        pass


def test_the_guard_voids_busy_windows_and_gives_up_after_its_wait() -> None:
    g = BusyGuard("cpu", {"wait_s": 0.2})
    g.probe = _Probe([LoadWindow(0.05, run_delay_share=0.5), LoadWindow(0.05, run_delay_share=0.0)])  # type: ignore[assignment]
    g.open()
    assert g.close() is not None and not g.exhausted  # void, timed again
    g.open()
    assert g.close() is None  # quiet: counts
    g.probe = _Probe([LoadWindow(0.1, run_delay_share=0.9)] * 10)  # type: ignore[assignment]
    while not g.exhausted:
        g.open()
        assert g.close() is not None
    s = g.summary(measured=1, wanted=40, least=20)
    assert s["busy"] and s["void_windows"] >= 2 and "90%" in s["seen"][0]
    why = busy_reason(s)
    assert why is not None and why.startswith("not measured: the machine was busy (") and "wait_s" in why
    stab = paired_stability(Ratio(3.5, 3.4, 3.9), [3.5] * 20, [1.0] * 20, [0.3] * 20, busy=s)
    assert stab.busy and not stab.stable and stab.verdict == "busy" and stab.reasons == (why,)
    assert Stability.from_json(stab.to_json()) == stab
    # enough quiet windows: a measurement, with a note that some were void
    ok = paired_stability(Ratio(1.0, 0.99, 1.01), [1.0] * 20, [1.0] * 20, [1.0] * 20,
                          busy=g.summary(measured=30, wanted=40, least=20))
    assert ok.stable and not ok.busy and any("void and timed again" in n for n in ok.notes)


def test_the_probe_sees_another_process_take_this_core() -> None:
    """A real reading: pinned to one core beside a busy loop pinned there too, the timing
    thread waits for the CPU, and the probe says so; alone on it, it does not wait much."""
    import os

    core = sorted(os.sched_getaffinity(0))[0]
    before = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", f"import os,time\nos.sched_setaffinity(0,{{{core}}})\n"
                            "t=time.time()+20\nwhile time.time()<t: pass\n"])
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.3)
        probe = LoadProbe("cpu")
        probe.start()
        t = time.perf_counter()
        while time.perf_counter() - t < 0.5:
            pass
        w = probe.stop()
        probe.close()
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()
    assert w.run_delay_share is not None and w.run_delay_share > 0.2, w
    assert w.busy(BusyRules()) is not None


def test_confirmed_interval_widens_with_few_blocks_and_holds_their_spread() -> None:
    tight = between_blocks([[1.50, 1.51, 1.49] * 5, [1.52, 1.53] * 7, [1.48, 1.50] * 7])
    assert tight is not None and 1.44 < tight.low < 1.49 and 1.52 < tight.high < 1.58
    # one wild block among three: the t interval (2 degrees of freedom) is wide, honestly
    wild = between_blocks([[1.3] * 10, [1.35] * 10, [4.3] * 10])
    assert wild is not None and wild.high > 4.0
    one = between_blocks([[2.0, 2.1, 1.9] * 4])
    assert one is not None and one.low < 2.0 < one.high


def test_confirmed_ranks_are_dense_groups() -> None:
    def d(name: str, r: float, lo: float, hi: float) -> ConfirmedDesign:
        return ConfirmedDesign(name, Ratio(r, lo, hi), None, None, (r,))

    out = {x.design_id: x for x in ranked([d("a", 1.6, 1.5, 1.7), d("b", 1.55, 1.45, 1.65),
                                             d("c", 1.31, 1.29, 1.39), d("e", 1.30, 1.2, 1.35),
                                             d("f", 1.0, 0.95, 1.05)])}
    assert [out[k].rank for k in "abcef"] == [1, 1, 2, 2, 3]
    assert out["a"].tied_with_best and out["b"].tied_with_best and not out["c"].tied_with_best


def test_a_design_timed_in_one_block_of_three_is_not_confirmed() -> None:
    from stratagem.core.search import DesignView
    from stratagem.search.confirm import combine

    busy = {"busy": True, "seen": ["the timing thread waited for a CPU 50% of the time"], "measured": 2,
            "wanted": 40, "waited_s": 30.0, "limit_s": 30.0}
    quiet = {"busy": False}

    def block(b: dict) -> dict:
        return {"programs": {"d": {"fresh": {"pair_ratios": [1.3] * 20, "busy": b}}}}

    v = DesignView(id="d", source="", status="valid", speedup=1.3, speedup_low=1.2, speedup_high=1.4)
    one = combine([block(quiet), block(busy), block(busy)], [v])[0]
    assert one.vs_reference is None and one.blocks == 1
    assert one.error.startswith("timed in 1 of 3 blocks, 2 needed: not measured: the machine was busy")
    two = combine([block(quiet), block(busy), block(quiet)], [v])[0]
    assert two.vs_reference is not None and two.blocks == 2 and not two.error


class _Driver:
    """NVML as a driver that reports one entry per process sampled lately (580 on the H200:
    this process is missing from the samples whenever it ran nothing in the last sample)."""

    def __init__(self, samples: list[tuple[int, int]], running: list[int], age_us: int | None = None) -> None:
        self.samples, self.running, self.age_us = samples, running, age_us
        """`age_us`: the samples were taken that long ago (None: just after `since`)."""

    def nvmlDeviceGetProcessUtilization(self, handle, buf, count, since) -> int:  # noqa: N802 - NVML's name
        n = count._obj
        if buf is None or n.value < len(self.samples):
            n.value = len(self.samples)
            return 7  # NVML_ERROR_INSUFFICIENT_SIZE
        for i, (pid, sm) in enumerate(self.samples):
            stamp = since.value + 1 if self.age_us is None else int(time.time() * 1e6) - self.age_us
            if stamp < since.value:  # NVML returns only samples after `since`
                n.value = i
                return 0
            buf[i].pid, buf[i].timeStamp, buf[i].smUtil = pid, stamp, sm
        n.value = len(self.samples)
        return 0

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count, procs) -> int:  # noqa: N802
        for i, pid in enumerate(self.running):
            procs[i].pid = pid
        count._obj.value = len(self.running)
        return 0


def test_another_process_on_the_gpu_is_seen_when_this_one_has_no_sample() -> None:
    import ctypes
    import os

    from stratagem.worker_api.machine_load import _Nvml

    other = os.getpid() + 100_000
    nvml = _Nvml(_Driver([(other, 99)], running=[os.getpid(), other]), ctypes.c_void_p())
    assert nvml.others_since(0) == {other: 99.0}
    # under a PID namespace NVML's pids are the host's: this process is the busiest one
    hidden = _Nvml(_Driver([(7, 80), (8, 20)], running=[7, 8]), ctypes.c_void_p())
    assert hidden.others_since(0) == {8: 20.0}
    assert _Nvml(_Driver([(7, 80)], running=[7]), ctypes.c_void_p()).others_since(0) == {}


def test_a_window_sees_a_process_sampled_in_the_second_before_it() -> None:
    """NVML samples a process about once a second and a driver may report only the latest
    sample: a 50 ms window must see a second process whose last sample predates it."""
    import ctypes
    import os

    from stratagem.worker_api.machine_load import _Nvml

    other = os.getpid() + 100_000

    def window(age_us: int) -> dict[int, float]:
        probe = LoadProbe("cpu")
        probe._gpu = _Nvml(_Driver([(other, 99)], running=[os.getpid(), other], age_us=age_us), ctypes.c_void_p())
        probe.start()
        time.sleep(0.05)
        return probe.stop().gpu_others

    assert window(500_000) == {other: 99.0}
    assert window(3_000_000) == {}  # an older sample is another time's
