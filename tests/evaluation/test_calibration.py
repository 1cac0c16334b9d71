"""Device peaks that are wrong are not believed: the eager reference beats the floor they give,
so they are measured again; `stratagem calibrate` re-measures on request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from stratagem.cli import main
from stratagem.domains.pytorch.domain import DOMAIN as PYTORCH
from stratagem.domains.pytorch.domain import PEAKS_VERSION, candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_calibration_the_reference_beats_is_redone_not_believed(cpu_config, _isolated_cache) -> None:
    cfg = cpu_config.model_copy(update={"correctness_trials": 2})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    evaluator = Evaluator(cfg, ex, "cpu")
    path = evaluator.peaks.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # what a first calibration on a loaded machine once cached: rates far below the real ones
    path.write_text(json.dumps({"version": PEAKS_VERSION, "bandwidth_gbps": 1.0, "cache_bandwidth_gbps": 1.0,
                                "matmul_tflops": {"float32": 1e-6, "bfloat16": 1e-6}}))
    design = candidate_design((FIX / "candidates" / "good_addmm.py").read_text())
    ev = asyncio.run(evaluator.evaluate(load_problem(FIX / "problem_linear.py"), design, with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    roof = ev.verdict.result("roofline")
    assert roof is not None and "earlier peaks were wrong" in roof.details.get("recalibrated", "")
    # the floor's rates are those of the precisions the reference was seen computing in (issue 58)
    assert roof.details["admitted"] == ["float32", "float64"]
    assert "the reference's float32 and above (what the reference was seen computing in)" in roof.details["basis"]
    fresh = json.loads(path.read_text())
    assert fresh["matmul_tflops"]["float32"] > 1e-3  # measured again and replaced


def test_peaks_of_an_older_format_are_measured_again(cpu_config, _isolated_cache) -> None:
    """Peaks cached before the CPU's cache bandwidth was calibrated lack its bytes floor: a
    newer stratagem measures again rather than run without it."""
    evaluator = Evaluator(cpu_config, LocalExecutor.for_devices(["cpu"], cpu_config, {"PATH": "/usr/bin:/bin"}), "cpu")
    path = evaluator.peaks.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"bandwidth_gbps": 7.0, "matmul_tflops": {"float32": 0.1}}))
    peaks = asyncio.run(evaluator.peaks.get(load_problem(FIX / "problem_linear.py"), PYTORCH.peaks))
    assert peaks is not None and peaks["version"] == PEAKS_VERSION and peaks["cache_bandwidth_gbps"] > 0
    assert json.loads(path.read_text())["version"] == PEAKS_VERSION


def test_calibrate_command_writes_the_peaks(capsys, _isolated_cache) -> None:
    assert main(["calibrate", "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "valid" and out["peaks"]["matmul_tflops"]["float32"] > 0
    assert Path(out["path"]).is_file() and Path(out["path"]).is_relative_to(_isolated_cache)


def test_peaks_an_honest_reference_outruns_are_raised_to_what_it_did() -> None:
    """On an H200 an eager ReLU over 6.4 GB moved 4.2 TB/s, above the calibrated copy: the
    reference is honest, so the bound it beats is raised to its own rate (and kept), never
    recalibrated at every evaluation; only the rate that bounds the floor moves."""
    from stratagem.core.verdict import ValidatorResult
    from stratagem.domains.pytorch.floor import demonstrated_peaks, reference_beats_floor

    peaks = {"bandwidth_gbps": 3900.0, "matmul_tflops": {"float32": 50.0, "tf32": 400.0}}
    timing = ValidatorResult("timing", "passed", details={"reference": {"median_ms": 3.04}})
    memory = ValidatorResult("roofline", "passed", details={
        "checked": True, "floor_ms": 3.30, "memory_ms": 3.30, "compute_ms": 0.0, "bound": "memory",
        "memory_floor": "main memory", "bandwidth_gbps": 3900.0, "rate_mode": "float32"})
    assert reference_beats_floor({"timing": timing}, memory) is not None
    raised = demonstrated_peaks({"timing": timing}, memory, peaks)
    assert raised is not None and abs(raised["bandwidth_gbps"] - 3900.0 * 3.30 / 3.04) < 1e-6
    assert raised["matmul_tflops"] == peaks["matmul_tflops"] and "eager reference" in raised["raised"][0]
    compute = ValidatorResult("roofline", "passed", details={
        "checked": True, "floor_ms": 4.0, "memory_ms": 1.0, "compute_ms": 4.0, "bound": "compute",
        "memory_floor": "main memory", "bandwidth_gbps": 3900.0, "rate_mode": "tf32"})
    raised = demonstrated_peaks({"timing": timing}, compute, peaks)
    assert raised is not None and raised["bandwidth_gbps"] == 3900.0
    assert abs(raised["matmul_tflops"]["tf32"] - 400.0 * 4.0 / 3.04) < 1e-6
    cache = ValidatorResult("roofline", "passed", details={**memory.details, "memory_floor": "cache"})
    assert demonstrated_peaks({"timing": timing}, cache, peaks) is None  # the CPU's cache floor: not raised


def test_a_cached_baseline_holds_for_the_same_torch_however_the_build_is_spelled() -> None:
    """On the H200 machine torch's metadata and `torch.__version__` spelled one build two ways,
    so every evaluation measured its baseline again; the release decides, not the spelling."""
    from stratagem.domains.pytorch.baselines import PyTorchBaselines, same_torch

    assert same_torch("2.11.0+cu130", "2.11.0")
    assert same_torch("2.11.0+cu130", "2.11.0+cu130") and same_torch("2.11.0", None)
    assert not same_torch("2.10.1+cu128", "2.11.0")
    # the domain's baseline rules are what the evaluator asks (it names no torch)
    rules = PyTorchBaselines({}, installed="2.11.0")
    assert rules.holds({"torch": "2.11.0+cu130"}) and rules.holds({})
    assert not rules.holds({"torch": "2.10.1+cu128"})


def test_baseline_cache_keys_are_the_domains_rules_and_unchanged() -> None:
    """The evaluator's cache key is made of where the worker measured it (its host and
    physical device: two machines never share a baseline) and the domain's rules (version, the
    environment's fields it names, settings)."""
    import hashlib
    import json

    from stratagem.domains.pytorch.baselines import TIMING_PROTOCOL, PyTorchBaselines
    from stratagem.evaluation.baselines import baseline_key, slot_key

    rules = PyTorchBaselines({"warmup_ms": 25.0}, installed=None)
    env = {"device_name": "H200", "device": "cuda", "torch": "2.11.0", "cuda": "13.0", "threads": 8, "host": "x",
           "physical_device": "cuda:0"}
    before = {"protocol": TIMING_PROTOCOL, "problem": "p1", "host": "x", "physical_device": "cuda:0",
              "device_name": "H200", "device": "cuda",
              "torch": "2.11.0", "cuda": "13.0", "threads": 8, "modes": ["compile", "eager"],
              "timing": {"warmup_ms": 25.0}}
    expect = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:32]
    assert baseline_key(rules, "p1", env, ["eager", "compile"]) == expect
    assert baseline_key(rules, "p1", {**env, "torch": "2.10.0"}, ["eager", "compile"]) != expect
    assert baseline_key(rules, "p1", {**env, "host": "y"}, ["eager", "compile"]) != expect
    assert baseline_key(rules, "p1", {**env, "physical_device": "cuda:1"}, ["eager", "compile"]) != expect
    assert slot_key(rules, "p1", "host", "cuda:0", ["eager"]).startswith("latest-")
