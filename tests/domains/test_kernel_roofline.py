"""The `profile` tool's table (`worker/profile.py`, `kernel_roofline.py`, `search/probes.py`):
a scripted GPU profile (kernels launched by operators with recorded shapes, dtypes and FLOPs)
becomes rows with their time, the bandwidth and FLOP rate each achieved against the device's
calibrated peaks and each one's floor; a kernel launched outside any operator keeps its time
alone; the rows are bounded, the rest summed; a CPU profile of a real call records torch's
operators with their work."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from stratagem.domains.pytorch.kernel_roofline import kernel_table
from stratagem.domains.pytorch.worker.profile import (
    kernel_rows,
    operator_rows,
    table,
    with_dtypes,
    work_of,
)
from stratagem.search.probes import profile_lines

PEAKS = {"bandwidth_gbps": 3000.0, "matmul_tflops": {"float32": 50.0, "tf32": 400.0, "bfloat16": 800.0}}


def op(name, shapes, dtypes, flops=0, parent=None):
    return SimpleNamespace(name=name, key=name, input_shapes=shapes, input_dtypes=dtypes, flops=flops,
                           cpu_parent=parent, kernels=[], cpu_children=[])


def launch(parent, *kernels):
    """A cudaLaunchKernel event under `parent`, carrying its kernels (name, device us)."""
    e = op("cudaLaunchKernel", [], [], parent=parent)
    e.kernels = [SimpleNamespace(name=n, duration=us) for n, us in kernels]
    return e


def test_a_scripted_gpu_profile_is_set_beside_the_peaks():
    mm = op("aten::mm", [[4096, 4096], [4096, 4096]], ["float", "float"], flops=2 * 4096**3)
    relu = op("aten::relu", [[4096, 4096]], ["c10::BFloat16"])
    events = [mm, launch(mm, ("sm90_xmma_gemm_f32", 3000.0)), relu, launch(relu, ("vectorized_relu", 20.0)),
              launch(None, ("triton_poi_fused_0", 10.0)),
              *[launch(None, (f"tiny_{i}", 0.5)) for i in range(20)]]
    rows = kernel_rows(events)
    profile = {"device": "cuda", "source": "torch.profiler", **table(rows, top=4)}
    assert [r[0] for r in profile["rows"]][:3] == ["sm90_xmma_gemm_f32", "vectorized_relu", "triton_poi_fused_0"]
    assert profile["rest"][0] == 19 and profile["total_us"] == 3000.0 + 20.0 + 10.0 + 10.0
    d = kernel_table(profile, PEAKS).details
    gemm, relu_row, triton = d["rows"][:3]
    assert gemm["bytes"] == 2 * 4096 * 4096 * 4 and gemm["flops"] == 2 * 4096**3
    assert abs(gemm["tflops"] - 2 * 4096**3 / 3000e-6 / 1e12) < 1e-6  # 45.8 TFLOP/s
    assert gemm["rate_mode"] == "float32" and 0.9 < gemm["flop_fraction"] < 0.95
    assert abs(gemm["floor_us"] - 2 * 4096**3 / 50e12 * 1e6) < 1e-6
    assert relu_row["bytes"] == 4096 * 4096 * 2 and "tflops" not in relu_row
    assert abs(relu_row["gbps"] - 4096 * 4096 * 2 / 20e-6 / 1e9) < 1e-6 and relu_row["bandwidth_fraction"] > 0.5
    assert triton["bytes"] is None and "gbps" not in triton and "floor_us" not in triton
    text = profile_lines(d, "the reference", floor_ms=2.9)
    lines = text.splitlines()
    assert len(lines) <= 4 + 5 and "- 19 more kernels, 9.5 us (0%)" in text
    assert lines[0].startswith("profile of one warm call of the reference, measured by torch.profiler:")
    assert "sm90_xmma_gemm_f32: 3 ms (99%), 1 calls; >= 44.74 GB/s (1% of peak); 45.81 TFLOP/s (92% of the float32 matmul peak); its floor 2.749 ms" in text
    assert "triton_poi_fused_0: 10 us (0%), 1 calls; no work recorded" in text
    assert "3000 GB/s" in text and "the roofline estimate of the whole problem" in text and "2.9 ms" in text


def test_the_answer_fits_a_prompt_largest_first_whatever_the_rows_it_is_given():
    """Issue 58: 40 kernels in any order read as the 12 heaviest, largest first, one line each
    with its time, achieved rates against the peaks and its floor; the rest as one line; the
    profiler named; the floor of the whole problem with what bounds it."""
    rows = [[f"k{i}", float(i + 1), 1, 1_000_000 * (i + 1), 2_000_000_000 * (i + 1), "float"] for i in range(40)]
    profile = {"device": "cuda", "source": "torch.profiler", "rows": rows[::-1][20:] + rows[::-1][:20],
               "rest": None, "total_us": sum(r[1] for r in rows)}
    d = kernel_table(profile, PEAKS).details
    text = profile_lines(d, "design `abc`", floor_ms=0.2, floor_basis="FLOPs at the float32 matmul rate")
    lines = text.splitlines()
    kernel_lines = [ln for ln in lines if ln.startswith("- k")]
    assert [ln.split(":")[0] for ln in kernel_lines] == [f"- k{i}" for i in range(39, 27, -1)]
    assert all("GB/s (" in ln and "TFLOP/s (" in ln and "of the float32 matmul peak" in ln and "its floor" in ln
               for ln in kernel_lines)
    rest_us = sum(range(1, 29))
    assert f"- 28 more kernels, {rest_us} us" in text
    assert "measured by torch.profiler" in lines[0] and len(lines) <= 12 + 5
    assert "FLOPs at the float32 matmul rate): 0.2 ms" in lines[-1]


def test_a_tf32_gemm_is_set_against_the_tf32_peak():
    flops = 2 * 4096**3
    profile = {"device": "cuda", **table([["sm90_xmma_gemm_tf32f32_tf32f32_f32_tn_n", 500.0, 1, None, flops, "float"],
                                          ["sm90_xmma_gemm_f32f32_f32f32_f32_tn_n", 3000.0, 1, None, flops, "float"]])}
    tf32, fp32 = kernel_table(profile, PEAKS).details["rows"][1], kernel_table(profile, PEAKS).details["rows"][0]
    assert tf32["rate_mode"] == "tf32" and 0.6 < tf32["flop_fraction"] < 0.7  # 275 of 400, not 550% of float32's
    assert fp32["rate_mode"] == "float32"


def test_a_kernel_split_over_an_operators_launches_shares_its_work_by_time():
    mm = op("aten::addmm", [[1024], [64, 1024], [1024, 1024]], ["float", "float", "float"], flops=1000)
    rows = {r[0]: r for r in kernel_rows([launch(mm, ("gemm", 30.0)), launch(mm, ("splitk_reduce", 10.0))])}
    assert rows["gemm"][4] == 750 and rows["splitk_reduce"][4] == 250


def test_a_launch_listed_under_an_operator_and_its_callee_counts_once():
    """torch 2.11 lists one softmax launch under `aten::softmax` and again under the
    `aten::_softmax` it calls: one launch, its time once, its operator's bytes once; two real
    launches of one kernel under two operators stay two."""
    outer = op("aten::softmax", [[4096, 1024], [], []], ["float", "Scalar", "Scalar"])
    inner = op("aten::_softmax", [[4096, 1024], [], []], ["float", "Scalar", "Scalar"], parent=outer)
    outer.kernels = inner.kernels = [SimpleNamespace(name="cunn_SoftMaxForward", duration=8450.0)]
    again = op("aten::_softmax", [[4096, 1024], [], []], ["float", "Scalar", "Scalar"])
    again.kernels = [SimpleNamespace(name="cunn_SoftMaxForward", duration=8450.0)]
    rows = {r[0]: r for r in kernel_rows([outer, inner])}
    assert rows["cunn_SoftMaxForward"][1:4] == [8450.0, 1, 4096 * 1024 * 4]
    rows = {r[0]: r for r in kernel_rows([outer, inner, again])}
    assert rows["cunn_SoftMaxForward"][1:4] == [16900.0, 2, 2 * 4096 * 1024 * 4]


def test_dtypes_come_from_the_profilers_own_results_where_events_lack_them():
    bare = SimpleNamespace(id=7, name="aten::relu", input_shapes=[[1024]])
    kin = SimpleNamespace(correlation_id=lambda: 7, dtypes=lambda: ["float"])
    prof = SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: [kin]))
    with_dtypes([bare], prof)
    assert bare.input_dtypes == ["float"] and work_of(bare) == (4096, None, "float")


def test_without_peaks_the_rows_keep_their_times_and_rates():
    profile = {"device": "cuda", **table([["k", 10.0, 2, 10_000, None, "float"]])}
    d = kernel_table(profile, None).details
    assert abs(d["rows"][0]["gbps"] - 1.0) < 1e-9 and "bandwidth_fraction" not in d["rows"][0] and d["peaks"] is None
    assert "calibrated peaks" not in profile_lines(d, "this code", None)


def test_an_operator_whose_callees_record_no_work_keeps_its_own():
    div = op("aten::div", [[1024, 1024], []], ["float", "Scalar"])
    div.self_cpu_time_total = 900.0
    conv = op("aten::_to_copy", [[]], ["double"], parent=div)
    conv.self_cpu_time_total = 30.0
    div.cpu_children = [conv]
    relu = op("aten::relu", [[1024, 1024]], ["float"])
    relu.self_cpu_time_total = 5.0
    clamp = op("aten::clamp_min", [[1024, 1024], []], ["float", "Scalar"], parent=relu)
    clamp.self_cpu_time_total = 800.0
    relu.cpu_children = [clamp]
    rows = {r[0]: r for r in operator_rows([div, conv, relu, clamp])}
    assert rows["aten::div"][3] == 1024 * 1024 * 4 and rows["aten::_to_copy"][3] is None
    assert rows["aten::relu"][3] is None and rows["aten::clamp_min"][3] == 1024 * 1024 * 4


def test_a_cpu_profile_records_torchs_operators_with_their_work():
    from torch.autograd import profiler

    m, x = torch.nn.Linear(256, 512), torch.randn(64, 256)
    with torch.no_grad(), profiler.profile(use_cpu=True, record_shapes=True, with_flops=True) as prof:
        torch.relu(m(x))
    rows = {r[0]: r for r in operator_rows(prof.function_events)}
    assert rows["aten::linear"][3] is None and rows["aten::linear"][4] is None  # it calls others: its work is theirs
    assert rows["aten::addmm"][4] == 2 * 64 * 256 * 512
    assert rows["aten::addmm"][3] == (512 + 64 * 256 + 256 * 512) * 4 and rows["aten::addmm"][5] == "float"
    assert rows["aten::clamp_min"][3] == 64 * 512 * 4
    assert rows["aten::as_strided"][3] is None  # a view moves no data: no rate, not an impossible one
