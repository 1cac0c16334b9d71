"""Device peaks that are wrong are not believed: the eager reference beats the floor they give,
so they are measured again; `stratagem calibrate` re-measures on request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from stratagem.cli import main
from stratagem.core.design import Design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_calibration_the_reference_beats_is_redone_not_believed(cpu_config, _isolated_cache) -> None:
    cfg = cpu_config.model_copy(update={"correctness_trials": 2})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    evaluator = Evaluator(cfg, ex, "cpu")
    path = evaluator.peaks_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # what a first calibration on a loaded machine once cached: rates far below the real ones
    path.write_text(json.dumps({"version": 2, "bandwidth_gbps": 1.0, "cache_bandwidth_gbps": 1.0,
                                "matmul_tflops": {"float32": 1e-6, "bfloat16": 1e-6}}))
    design = Design.from_source((FIX / "candidates" / "good_addmm.py").read_text())
    ev = asyncio.run(evaluator.evaluate(load_problem(FIX / "problem_linear.py"), design, with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    roof = ev.verdict.result("roofline")
    assert roof is not None and "earlier peaks were wrong" in roof.details.get("recalibrated", "")
    fresh = json.loads(path.read_text())
    assert fresh["matmul_tflops"]["float32"] > 1e-3  # measured again and replaced


def test_peaks_of_an_older_format_are_measured_again(cpu_config, _isolated_cache) -> None:
    """Peaks cached before the CPU's cache bandwidth was calibrated lack its bytes floor: a
    newer stratagem measures again rather than run without it."""
    evaluator = Evaluator(cpu_config, LocalExecutor.for_devices(["cpu"], cpu_config, {"PATH": "/usr/bin:/bin"}), "cpu")
    path = evaluator.peaks_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"bandwidth_gbps": 7.0, "matmul_tflops": {"float32": 0.1}}))
    peaks = asyncio.run(evaluator.device_peaks(load_problem(FIX / "problem_linear.py")))
    assert peaks is not None and peaks["version"] == 2 and peaks["cache_bandwidth_gbps"] > 0
    assert json.loads(path.read_text())["version"] == 2


def test_calibrate_command_writes_the_peaks(capsys, _isolated_cache) -> None:
    assert main(["calibrate", "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "valid" and out["peaks"]["matmul_tflops"]["float32"] > 0
    assert Path(out["path"]).is_file() and Path(out["path"]).is_relative_to(_isolated_cache)
