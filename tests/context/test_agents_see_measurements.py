"""What the agents see: the environment block (CPU and GPU), each design's measurements in the
context and in read_design, the Analyst's side-by-side comparison, and the reference timings
in the very first prompt of a run."""

from __future__ import annotations

import sys
from pathlib import Path

from stratagem.agents.analyst import compare_text, describe_design
from stratagem.context import render
from stratagem.core.search import DesignView, Measures
from stratagem.search.state import measures_of
from stratagem.store.records import EvaluationRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))

CPU_ENV = {"torch": "2.13.0+cpu", "python": "3.11.7", "device": "cpu", "device_name": "Intel(R) Xeon(R) Gold",
           "threads": 2, "cpu_capability": "AVX512", "isa": ["avx2", "fma", "avx512f"], "compiler": "GCC 13.3"}
GPU_ENV = {"torch": "2.11.0", "device": "cuda:0", "device_name": "NVIDIA H200", "cuda": "13.0",
           "capability": "9.0", "memory_gb": 139.8, "triton": "3.6.0"}


def test_the_cpu_environment_block_speaks_of_cpu_code():
    text = render.environment_text("cpu", CPU_ENV, domain="pytorch")
    assert ("Device: CPU Intel(R) Xeon(R) Gold (timed on 2 thread(s), eager too, by design (`[pytorch] cpu_threads`), "
            "so work spread over more cores gains nothing; instruction sets avx2 fma avx512f") in text
    assert "torch 2.13.0+cpu" in text and "torch built with GCC 13.3" in text
    assert "CUDA and Triton kernels cannot run on this device" in text
    assert "cuBLAS" not in text


def test_the_problem_dtype_is_stated_once_measured():
    assert "The problem's output dtype: float16." in render.environment_text("cpu", {**CPU_ENV, "problem_dtype": "float16"}, domain="pytorch")


def test_the_gpu_environment_block_names_the_gpu_and_the_versions():
    text = render.environment_text("cuda:0", GPU_ENV, domain="pytorch")
    assert "Device: GPU NVIDIA H200 (compute capability 9.0, 139.8 GB)." in text
    assert "torch 2.11.0, CUDA 13.0, Triton 3.6.0" in text and "Triton kernels" in text
    assert "cannot run" not in text


def test_the_prompts_carry_the_environment_block():
    brief = render.ProblemBrief("p", "class Model: pass", device="cpu", environment=CPU_ENV, domain="pytorch")
    from stratagem.core.search import Plan

    prompt = render.render_implementor(brief, Plan("innovate", instructions="x"), (), worker="implementor-1",
                                       max_attempts=3)
    assert "Device: CPU Intel(R) Xeon(R) Gold" in prompt and "Write CPU code" in prompt


def record(validators: list[dict]) -> EvaluationRecord:
    return EvaluationRecord(design_id="d" * 64, problem_id="p", status="valid", device="cuda:0", runtime_ms=0.25,
                            speedup=4.0, validators=validators, environment={}, seeds=[1], reference_ms={},
                            created_at=0.0)


def measured_view() -> DesignView:
    ev = record([
        {"name": "load", "outcome": "passed", "duration_s": 82.5, "details": {}},
        {"name": "correctness", "outcome": "passed", "details": {"max_abs_err": 3e-6, "max_rel_err": 1e-5}},
        {"name": "timing", "outcome": "passed", "details": {
            "runtime": {"median_ms": 0.25, "q1_ms": 0.24, "q3_ms": 0.27},
            "reference": {"median_ms": 1.0}, "pairs": 12,
            "profile": {"kernels": [["relu_fused_kernel", 210.5], ["memcpy", 3.0]], "unit": "us"}}},
    ])
    return DesignView("d" * 64, "class ModelNew: pass\n", "valid", 2, runtime_ms=0.25, speedup=4.0,
                      speedup_low=3.9, speedup_high=4.1, measures=measures_of(ev, "load"))


def test_the_context_and_read_design_show_what_the_harness_measured():
    v = measured_view()
    m = v.measures
    assert (m.runtime_q1_ms, m.runtime_q3_ms, m.reference_ms, m.pairs, m.compile_s) == (0.24, 0.27, 1.0, 12, 82.5)
    for text in (render.render_design(v, domain="pytorch"), describe_design(v, domain="pytorch")):
        assert "4.00x [3.90, 4.10] vs eager" in text
        assert ("its own evaluation: design 0.25 ms, eager 1 ms timed beside it (medians; quartiles "
                "0.24-0.27 ms, 12 block pairs)") in text
        assert "build time: 82.5 s" in text
        assert "error vs reference: max abs 3e-06, max rel 1e-05" in text
        assert "relu_fused_kernel 210 us" in text


def test_the_analyst_compares_two_designs_measurements():
    a = measured_view()
    b = DesignView("e" * 64, "x", "invalid", 3, report="[correctness] wrong",
                   measures=Measures(failures=("correctness (wrong_output): max abs 0.3",)))
    text = compare_text(a, b, domain="pytorch")
    assert "| build time | 82.5 s | - |" in text
    assert "| failures | - | correctness (wrong_output): max abs 0.3 |" in text
    assert "| quartiles | 0.24-0.27 ms | - |" in text


def test_the_first_strategist_prompt_has_the_reference_timings(tmp_path):
    from agent_fakes_path import first_prompt_of_a_run

    prompt = first_prompt_of_a_run(tmp_path)
    assert "Reference timings (ms, this invocation's baseline, timed before its first iteration): eager 1, compile 0.8" in prompt
    assert "not measured yet" not in prompt


def test_timing_notes_and_lock_waits_reach_the_agents_context() -> None:
    """Issue 23: stability notes were stored but never shown to the agents; a long wait for
    the timing lock is said as such (not charged to the design)."""
    from stratagem.search.state import timing_notes_of

    ev = record([
        {"name": "load", "outcome": "passed", "duration_s": 3.0, "details": {"lock_wait_s": 40.2}},
        {"name": "timing", "outcome": "passed", "duration_s": 5.0, "details": {"lock_wait_s": 146.4}},
    ]).model_copy(update={"stability": {"verdict": "stable", "reasons": [],
                                        "notes": ["the candidate samples fall into two clusters"]}})
    notes = timing_notes_of(ev)
    assert notes == ("the candidate samples fall into two clusters",
                     "waited 187 s for the timing lock (not charged to the design)")
    view = DesignView(id="d" * 64, source="x", status="valid", speedup=1.2, speedup_low=1.1, speedup_high=1.3,
                      timing_notes=notes)
    text = render.render_design(view, domain="pytorch")
    assert "timing notes: the candidate samples fall into two clusters; waited 187 s" in text
    quiet = record([{"name": "timing", "outcome": "passed", "details": {"lock_wait_s": 0.2}}])
    assert timing_notes_of(quiet) == ()


def test_the_roofline_validator_s_floor_reaches_the_measures():
    ev = record([{"name": "roofline", "outcome": "passed",
                  "details": {"checked": True, "floor_ms": 0.2, "sol_fraction": 0.8, "runtime_ms": 0.25}}])
    m = measures_of(ev, "load")
    assert (m.floor_ms, m.floor_fraction) == (0.2, 0.8)
    # what bounds the floor (issue 58: a float32 floor at TF32's rate showed a headroom no design could reach)
    basis = "FLOPs at the float32 matmul rate, the fastest of the precisions a design may compute in: ..."
    ev = record([{"name": "roofline", "outcome": "passed",
                  "details": {"checked": True, "floor_ms": 0.2, "sol_fraction": 0.8, "basis": basis}}])
    assert any(basis in line for line in measures_of(ev, "load").lines())
    unchecked = record([{"name": "roofline", "outcome": "passed", "details": {"checked": False, "note": "no work"}}])
    assert measures_of(unchecked, "load").floor_ms is None
