"""The roofline floor: fastest admitted rate, memory vs compute bound, impossible speeds."""

from __future__ import annotations

import pytest

from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.floor import (
    CACHE_HEADROOM,
    PEAKS_VERSION,
    floor_ms,
    roofline_result,
)
from stratagem.domains.pytorch.precisions import admitted

PEAKS = {"bandwidth_gbps": 4000.0, "matmul_tflops": {"float32": 50.0, "tf32": 400.0, "bfloat16": 800.0, "float16": 800.0}}
FP32_TOL = {"atol": 1e-4, "rtol": 1e-4}


def ran(**lowest):
    """Correctness details under the default rule whose reference was seen computing in `lowest`."""
    return {"mode": "reference", "reference_precision": {"lowest": lowest}}


MATMUL = {"flops": 2 * 4096**3, "min_bytes": 3 * 4096 * 4096 * 4, "dtype": "float32"}  # 137 GFLOP


def test_a_float32_reference_in_full_float32_bounds_the_floor_at_the_float32_rate():
    """Issue 58: the floor of a float32 matmul was at TF32's rate while the default rule rejects
    a TF32 design where the reference ran float32; no design could reach it."""
    f = floor_ms(MATMUL, PEAKS, FP32_TOL, correctness=ran(other="float32", matmul="float32"))
    assert f["rate_mode"] == "float32" and f["bound"] == "compute"
    assert f["floor_ms"] == pytest.approx(2 * 4096**3 / 50e12 * 1e3)
    assert "tf32" not in f["admitted"] and "float32 matmul rate" in f["basis"]
    # without the reference's record, its output dtype stands for its precision: the same floor
    assert floor_ms(MATMUL, PEAKS, FP32_TOL)["rate_mode"] == "float32"


def test_a_reference_that_ran_tf32_admits_tf32s_rate():
    f = floor_ms(MATMUL, PEAKS, FP32_TOL, correctness=ran(other="float32", conv="tf32"))
    assert f["rate_mode"] == "tf32" and f["floor_ms"] == pytest.approx(2 * 4096**3 / 400e12 * 1e3)
    assert "the reference's tf32 and above (what the reference was seen computing in)" in f["basis"]


def test_the_tolerance_admits_precisions_below_the_reference_by_their_rounding():
    assert admitted("float32", FP32_TOL)[0] == ["float32", "float64"]
    modes, why = admitted("float32", {"atol": 1e-3, "rtol": 1e-3}, ran(other="float32"))
    assert modes == ["float16", "tf32", "float32", "float64"] and "by the tolerance 0.001" in why
    assert "bfloat16" in admitted("float32", {"atol": 1e-2, "rtol": 1e-2})[0]
    assert {"float16", "bfloat16"} <= set(admitted("bfloat16", {"atol": 1e-2, "rtol": 1e-2})[0])
    # a half-precision reference admits its own precision whatever the tolerance
    assert admitted("float16", {"atol": 0.0, "rtol": 0.0}, ran(other="float16"))[0][0] == "float16"


def test_a_float64_problem_is_bounded_at_the_float64_rate_or_by_its_bytes():
    work = {**MATMUL, "dtype": "float64"}
    tol = {"atol": 1e-7, "rtol": 1e-7}
    f = floor_ms(work, {**PEAKS, "matmul_tflops": {**PEAKS["matmul_tflops"], "float64": 25.0}}, tol,
                 correctness=ran(other="float64", matmul="float64"))
    assert f["rate_mode"] == "float64" and f["floor_ms"] == pytest.approx(2 * 4096**3 / 25e12 * 1e3)
    old = floor_ms(work, PEAKS, tol, correctness=ran(other="float64"))  # peaks without a float64 rate
    assert old["rate_mode"] is None and old["bound"] == "memory" and "no calibrated matmul rate" in old["basis"]


def test_a_roofline_result_says_what_bounds_its_floor():
    r = roofline_result(100.0, MATMUL, PEAKS, FP32_TOL, correctness=ran(other="float32"))
    assert r.details["rate_mode"] == "float32" and r.details["sol_fraction"] == pytest.approx(2.748779069 / 100)
    # a float32 design at TF32's floor is now flagged impossible only below the float32 floor's margin
    assert roofline_result(0.4, MATMUL, PEAKS, FP32_TOL, correctness=ran(other="float32")).outcome == "failed"


def test_memory_bound_floor():
    work = {"flops": 0, "min_bytes": 2 * 4096 * 393216 * 4, "dtype": "float32"}  # ReLU
    f = floor_ms(work, PEAKS, FP32_TOL)
    assert f["bound"] == "memory"
    assert f["floor_ms"] == pytest.approx(12.884901888e9 / 4000e9 * 1e3)


def test_impossible_runtime_is_rejected_and_honest_one_reports_speed_of_light():
    work = {"flops": 0, "min_bytes": 4_000_000_000, "dtype": "float32"}  # floor 1 ms
    fake = roofline_result(0.3, work, PEAKS, FP32_TOL, margin=0.5)
    assert fake.outcome == "failed" and fake.kind == "rejected"
    assert "impossible speed" in fake.reason and "below the roofline floor" in fake.reason
    honest = roofline_result(1.25, work, PEAKS, FP32_TOL, margin=0.5)
    assert honest.outcome == "passed"
    assert honest.details["sol_fraction"] == pytest.approx(0.8)
    # within the margin: faster than the measured floor but not impossibly so
    assert roofline_result(0.8, work, PEAKS, FP32_TOL, margin=0.5).outcome == "passed"


def test_unchecked_without_peaks_or_work_says_so():
    r = roofline_result(1.0, None, PEAKS, FP32_TOL)
    assert r.outcome == "passed" and r.details["checked"] is False and "work" in r.details["note"]
    r = roofline_result(1.0, {"flops": 1, "min_bytes": 1}, None, FP32_TOL)
    assert r.details["checked"] is False and "peaks" in r.details["note"]


def test_without_cache_flushes_the_bytes_floor_uses_the_cache_bandwidth():
    # The CPU timer does not flush caches: a cache-resident working set beats main-memory
    # bandwidth honestly, so the bytes term there uses the calibrated cache bandwidth.
    work = {"flops": 0, "min_bytes": 10**9, "dtype": "float32"}  # 1 GB: 2 ms at 2 x 250 GB/s
    peaks = {**PEAKS, "cache_bandwidth_gbps": 250.0}
    assert roofline_result(0.001, work, peaks, FP32_TOL, cache_flushed=True).outcome == "failed"
    r = roofline_result(0.5, work, peaks, FP32_TOL, cache_flushed=False)
    assert CACHE_HEADROOM == 2.0
    assert r.outcome == "failed" and r.details["memory_floor"] == "cache"
    assert r.details["floor_ms"] == pytest.approx(2.0) and "cache" in r.reason
    assert roofline_result(1.5, work, peaks, FP32_TOL, cache_flushed=False).outcome == "passed"
    # peaks calibrated before the cache bandwidth existed: no bytes floor, the compute one stays
    r = roofline_result(0.001, work, PEAKS, FP32_TOL, cache_flushed=False)
    assert r.outcome == "passed" and r.details["memory_floor"] is None
    heavy = {"flops": 10**15, "min_bytes": 0, "dtype": "float32"}
    assert roofline_result(0.001, heavy, PEAKS, FP32_TOL, cache_flushed=False).outcome == "failed"


def test_the_cpu_floor_never_rejects_honest_cache_resident_work():
    """Calibrated on this machine, the CPU floor stays under the runtimes of honest memory-bound
    ops at every working-set size from L1 to beyond L3, timed as the CPU timer times them
    (back-to-back calls on the same tensors: everything that fits stays cached). A calibration
    that a loaded machine slowed is measured again once, as the harness does when the
    reference beats its floor (`Evaluator._with_peaks`)."""
    import time

    import torch

    from stratagem.domains.pytorch.worker import roofline

    ops = {"relu": torch.relu, "sum": torch.sum, "add": lambda x: x + x, "neg_": lambda x: x.neg_(),
           "clone": torch.clone}
    timed = []
    for kib in (16, 64, 256, 1024, 4096, 16384):
        x = torch.randn(kib * 256)
        for name, op in ops.items():
            work = roofline.work(_Wrap(op), [x])
            for _ in range(3):
                op(x)
            timed.append((name, kib, min(_per_call_ms(op, x, time) for _ in range(5)), work))

    def failures(peaks):  # type: ignore[no-untyped-def]
        results = [(name, kib, roofline_result(best, work, peaks, FP32_TOL, cache_flushed=False))
                   for name, kib, best, work in timed]
        return [(n, k, r.reason) for n, k, r in results if r.outcome != "passed"], [
            r.details["sol_fraction"] for _, _, r in results if r.outcome == "passed"]

    peaks = roofline.calibrate("cpu")
    assert peaks["cache_bandwidth_gbps"] > 0 and peaks["version"] == PEAKS_VERSION
    assert peaks["matmul_tflops"]["float64"] > 0
    bad, tight = failures(peaks)
    if bad:  # a calibration slowed by a loaded machine: measured again once, as the harness does
        bad, tight = failures(roofline.calibrate("cpu"))  # when the reference beats its floor
    assert not bad, bad
    assert max(tight) < 1 / 0.5, tight  # and never within the margin's reach


class _Wrap:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *a):
        return self.fn(*a)

    def parameters(self):
        return iter(())


def _per_call_ms(op, x, time) -> float:
    loops = 20
    t0 = time.perf_counter()
    for _ in range(loops):
        op(x)
    return (time.perf_counter() - t0) * 1e3 / loops


def test_the_roofline_follows_the_precision_the_calibrated_rule_admitted() -> None:
    from stratagem.config import EvaluationConfig
    from stratagem.core.verdict import ValidatorResult
    from stratagem.domains.pytorch import domain
    from stratagem.domains.pytorch.problem import parse_problem

    problem = parse_problem("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x @ x\n"
                            "def get_inputs():\n    return [torch.randn(8, 8)]\ndef get_init_inputs():\n    return []\n",
                            name="mm")
    peaks = {"bandwidth_gbps": 1000.0, "matmul_tflops": {"float32": 50.0, "tf32": 400.0, "bfloat16": 800.0,
                                                         "float16": 800.0}}
    work = {"flops": 2e12, "min_bytes": 0, "dtype": "float32"}
    timing = ValidatorResult("timing", "passed", details={"runtime": {"median_ms": 3.0, "l2_flush_bytes": 1}, "work": work})

    def floor_mode(trials_anchor: list[dict], mode: str = "calibrated", **lowest: str) -> str:
        correct = ValidatorResult("correctness", "passed", details={
            "mode": mode, "trials": [{"anchor": trials_anchor}],
            **({"reference_precision": {"lowest": lowest}} if lowest else {})})
        r = domain.run_parent_validator("roofline", problem, candidate_design("x = 1"), EvaluationConfig(),
                                        {"timing": timing, "correctness": correct}, peaks)
        return str(r.details["rate_mode"])

    # eager accurate to 1e-6 of the output: the rule admits float32-level error only (TF32 rounds at 5e-4)
    assert floor_mode([{"limit": 1e-6, "magnitude": 1.0, "reference": 2e-7, "candidate": 1e-7}]) == "float32"
    # the default rule: the reference's own precision, as the correctness stage saw it
    assert floor_mode([], "reference", other="float32", matmul="float32") == "float32"
    assert floor_mode([], "reference", other="float32", matmul="tf32") == "tf32"
    # eager itself off by 0.5% (say TF32 convolutions): 2% admitted, so bf16 rates bound the floor
    assert floor_mode([{"limit": 2e-2, "magnitude": 1.0, "reference": 5e-3, "candidate": 1e-3}]) in ("bfloat16", "float16")
    assert domain.admitted_tolerance({"trials": [{"anchor": [{"limit": 4.0, "magnitude": 200.0}]}]}) == {"atol": 0.0, "rtol": 0.02}
