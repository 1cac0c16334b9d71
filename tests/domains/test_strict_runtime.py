"""The strict policy proves at run time that the candidate's own code did the timed work
(issue 23): the `provenance` stage runs after timing and measures, over calls made the way the
timed ones are, the share of their time spent in code the candidate compiled itself.

On the CPU the candidates here use `tests/fixtures/strict/relu_capi.cpp`, a native ReLU built in
seconds (the static checks, which want `load_inline` under strict, are let through: these
tests are about the worker's stage). The `load_inline` versions, checked statically as well,
build a torch extension (one to two minutes on two cores) and are marked `slow`.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import torch

from stratagem.core.verdict import ValidatorResult
from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.static.checks import checks_for_policy, run_static_checks
from stratagem.domains.pytorch.worker import provenance, runtime
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator
from stratagem.worker_api.stages import StageFailure

FIX = Path(__file__).resolve().parents[1] / "fixtures"
STRICT = FIX / "strict"


def _evaluate(cfg, source: str, policy: str, problem: str = "problem_relu.py"):
    cfg = cfg.model_copy(update={"integrity": policy, "correctness_trials": 2})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    return asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(FIX / problem), candidate_design(source),
                                                         with_baseline=False))


@pytest.fixture
def capi(cpu_config, monkeypatch):
    """Evaluate a `capi_*` fixture, its static checks let through."""
    monkeypatch.setattr(domain, "run_static_checks", lambda *a, **k: ValidatorResult("static_checks", "passed"))

    def run(name: str, policy: str = "strict"):
        src = (STRICT / f"capi_{name}.py").read_text().replace("__SOURCE__", str(STRICT / "relu_capi.cpp"))
        return _evaluate(cpu_config, src, policy)

    return run


def _provenance_failure(ev) -> ValidatorResult:
    assert ev.verdict.status == "invalid", ev.verdict.report()
    prov = ev.verdict.result("provenance")
    assert prov is not None and prov.outcome == "failed", ev.verdict.report()
    assert prov.kind == "rejected"
    timing = ev.verdict.result("timing")
    assert timing is not None and timing.outcome == "passed"  # provenance comes after timing
    return prov


# -- through the harness (a sandboxed worker, the judge, the parent's graph) -----------------

def test_an_honest_native_kernel_is_valid_with_its_share(capi) -> None:
    ev = capi("honest")
    assert ev.verdict.status == "valid", ev.verdict.report()
    d = ev.verdict.result("provenance").details
    assert d["checked"] is True and d["case"] == "own_code"
    assert d["calls_measured"] == d["calls_running_own_code"] == 5
    assert d["own_time_fraction"] > 0.8, d
    assert d["own_functions"] == ["strict_relu_capi.relu"]
    assert d["before_timing"]["own_calls"]["correctness"] > 0
    assert d["replay"].startswith("the output changed")


def test_a_kernel_in_a_dead_branch_never_ran(capi) -> None:
    prov = _provenance_failure(capi("dead_branch"))
    assert prov.details["case"] == "never_ran"
    assert "never ran" in prov.reason and "torch.relu" in prov.reason, prov.reason
    assert prov.details["own_time_fraction"] == 0.0


@pytest.mark.slow
def test_lenient_still_accepts_the_dead_branch(capi) -> None:
    ev = capi("dead_branch", "lenient")
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.verdict.result("provenance") is None


@pytest.mark.slow
def test_a_kernel_run_only_in_the_first_calls_fails_through_the_harness(capi) -> None:
    prov = _provenance_failure(capi("warmup_only"))
    assert prov.details["case"] == "ran_only_outside", prov.reason
    assert "ran only outside the measured calls" in prov.reason


@pytest.mark.slow
def test_a_kernel_on_a_token_slice_fails_through_the_harness(capi) -> None:
    prov = _provenance_failure(capi("token_slice"))
    assert prov.details["case"] == "small_share", prov.reason


# -- the stage itself, in this process (seconds each) -----------------------------------------

class _Worker:
    """What `run_provenance` and `watching` use of the worker, on the CPU."""

    def __init__(self, module, reference_module) -> None:
        self.device = "cpu"
        self.req = {"timing_seed": 1234, "stages": [{"name": "provenance"}], "own_kernels": []}
        self.programs = runtime.Programs(reference_module=reference_module, reference=reference_module.Model(),
                                         init_inputs=[], candidate_module=module, candidate=module.ModelNew())

    def loaded(self, need_candidate: bool):
        return self.programs

    def make_inputs(self, p, seed: int):
        return runtime.make_inputs(p.reference_module, seed, "cpu")

    def call_candidate(self, model, inputs):
        return model(*inputs)

    def call_reference(self, model, inputs):
        return model(*inputs)

    def tolerances(self):
        return {"float32": {"atol": 1e-5, "rtol": 1e-5}}


@pytest.fixture
def in_process(tmp_path, monkeypatch, _isolated_cache):
    """A worker stand-in for a `capi_*` fixture, built in this process (a build root of its
    own: the harness's workers claim theirs)."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(_isolated_cache / "in_process_extensions"))
    reference = runtime.load_module("strict_runtime_reference", (FIX / "problem_relu.py").read_text(), tmp_path,
                                    "reference.py")

    def make(name: str, source: str | None = None) -> _Worker:
        src = source or (STRICT / f"capi_{name}.py").read_text()
        src = src.replace("__SOURCE__", str(STRICT / "relu_capi.cpp"))
        return _Worker(runtime.load_module(f"strict_runtime_{name}", src, tmp_path, f"{name}.py"), reference)

    return make


def _fails(w: _Worker) -> StageFailure:
    with pytest.raises(StageFailure) as e:
        provenance.run_provenance(w)  # type: ignore[arg-type]  # a stand-in with what the stage uses
    assert sys.getprofile() is None  # the hook never outlives the stage
    return e.value


def test_in_process_the_honest_kernel_passes(in_process) -> None:
    w = in_process("honest")
    d = provenance.run_provenance(w)
    assert d["case"] == "own_code" and d["own_time_fraction"] > 0.8, d
    assert d["calls_running_own_code"] == d["calls_measured"] == 5
    assert d["replay"].startswith("the output changed") and d["disabled_outputs"] == 1
    assert sys.getprofile() is None


ALIASED = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

_ext = load(name="strict_relu_capi", sources=["__SOURCE__"], extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = _ext.relu  # bound to another name, on the instance

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        return self.op(x.data_ptr(), y, y.data_ptr(), x.numel())
"""


def test_in_process_an_own_function_bound_to_another_name_is_still_its_own(in_process) -> None:
    d = provenance.run_provenance(in_process("aliased", ALIASED))
    assert d["case"] == "own_code" and d["own_time_fraction"] > 0.8, d
    assert d["replay"].startswith("the output changed"), d  # the instance's binding was disabled too


def test_in_process_the_dead_branch_never_ran(in_process) -> None:
    f = _fails(in_process("dead_branch"))
    assert f.details["case"] == "never_ran" and "never ran" in f.reason, f.reason


def test_in_process_a_kernel_used_only_before_timing_ran_only_outside(in_process) -> None:
    w = in_process("warmup_only")
    x = torch.randn(4, 8)
    with provenance.watching(w, "correctness"), torch.no_grad():
        for _ in range(3):  # its first calls: the correctness trials
            w.programs.candidate(x)
    assert sys.getprofile() is None
    f = _fails(w)
    assert f.details["case"] == "ran_only_outside", f.reason
    assert f.details["before_timing"]["own_calls"] == {"correctness": 3}
    assert "ran only outside the measured calls" in f.reason and "torch.relu" in f.reason, f.reason


def test_in_process_a_kernel_on_a_token_slice_has_a_small_share(in_process) -> None:
    f = _fails(in_process("token_slice"))
    assert f.details["case"] == "small_share", f.reason
    assert f.details["calls_running_own_code"] == 5 and f.details["own_time_fraction"] < 0.2, f.details
    assert "small share" in f.reason and "torch.relu" in f.reason, f.reason


SMALL_RELU = (FIX / "problem_relu.py").read_text().replace("batch_size = 256", "batch_size = 2").replace(
    "dim = 4096", "dim = 8")


@pytest.mark.parametrize("small", [False, True], ids=["256x4096", "2x8"])
@pytest.mark.parametrize("steps", [1, 4, 16])
def test_in_process_a_layout_step_around_an_honest_kernel_passes(in_process, tmp_path, small, steps) -> None:
    """Issue 42: views, reshapes, size queries and allocation are layout, not work: the share
    is own native time over own plus library work, whatever the problem's size."""
    src = (STRICT / "capi_layout.py").read_text().replace("LAYOUT_STEPS = 1", f"LAYOUT_STEPS = {steps}")
    w = in_process(f"layout_{steps}_{int(small)}", src)
    if small:
        w.programs.reference_module = runtime.load_module(f"strict_small_{steps}", SMALL_RELU, tmp_path,
                                                          f"small_{steps}.py")
    d = provenance.run_provenance(w)
    assert d["case"] == "own_code" and d["own_time_fraction"] >= 0.5, d
    assert d["layout_s"] > 0 and any("movedim" in name for name, _ in d["layout"]), d["layout"]
    assert not any("movedim" in name or "reshape" in name for name, _ in d["library"]), d["library"]
    assert d["replay"].startswith("the output changed"), d


def test_in_process_a_copying_layout_call_counts_as_work() -> None:
    """A copy-capable layout call whose calls mostly took a copy's time is work; one slow call
    among views is not (a view beside a CPU hog took 142 us of the process's CPU time, and
    an honest kernel's reshape was counted as a library call doing its work)."""
    from stratagem.domains.pytorch.worker.native_calls import is_layout, split_work

    assert is_layout("Tensor.reshape") and is_layout("torch._C._get_tracing_state", copied=True)
    assert not is_layout("Tensor.contiguous", copied=True)
    assert not is_layout("torch.relu") and not is_layout("Tensor.sum")
    work, layout = split_work({"Tensor.reshape": [16, 16 * 2e-5 + 1.4e-4, 1],  # 15 views, 1 preempted
                               "Tensor.contiguous": [4, 4 * 5e-3, 4],  # it copied, every time
                               "Tensor.flatten": [2, 3e-4, 1],  # one of two: not most
                               "torch.relu": [1, 1e-6, 0]})
    assert work == {"Tensor.contiguous", "torch.relu"} and layout == {"Tensor.reshape", "Tensor.flatten"}


def test_in_process_the_token_slice_reason_names_what_was_counted(in_process) -> None:
    f = _fails(in_process("token_slice"))
    assert "own native calls and library calls that computed" in f.reason, f.reason
    assert "torch.relu" in f.reason and f.details["counted"].startswith("own native time"), f.reason


def test_in_process_a_kernel_whose_output_is_unused_fails_the_replay(in_process) -> None:
    f = _fails(in_process("decoy"))
    # its own loop and torch.relu take comparable time: either the share or the replay fails it
    assert "not doing the work" in f.reason or f.details["case"] == "small_share", f.reason


def test_watching_is_off_outside_strict_and_for_timing(in_process) -> None:
    w = in_process("honest")
    with provenance.watching(w, "timing"):
        assert sys.getprofile() is None
    w.req = {**w.req, "stages": [{"name": "timing"}]}
    with provenance.watching(w, "correctness"):
        assert sys.getprofile() is None


# -- static side -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["honest", "dead_branch", "warmup_only", "token_slice"])
def test_the_load_inline_cheats_pass_the_static_checks(name) -> None:
    """Only the run-time check can tell these apart from the honest candidate."""
    problem = load_problem(FIX / "problem_relu.py")
    src = (STRICT / f"inline_{name}.py").read_text()
    for policy in ("strict", "lenient"):
        r = run_static_checks(problem, src, checks=checks_for_policy(policy, "cpu"))
        assert r.outcome == "passed", (policy, r.details)


def test_probing_the_instrumentation_is_rejected_statically() -> None:
    problem = load_problem(FIX / "problem_relu.py")
    src = (
        "import sys\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if sys.getprofile() is None and sys.gettrace() is None and not "
        "torch.autograd.profiler._is_profiler_enabled:\n"
        "            return torch.relu(x)\n"
        "        return torch.relu(x)\n"
    )
    r = run_static_checks(problem, src, checks=checks_for_policy("lenient", "cpu"))
    found = " ".join(x["message"] for x in r.details["rejections"])
    for name in ("sys.getprofile", "sys.gettrace", "torch.autograd.profiler._is_profiler_enabled"):
        assert f"`{name}`" in found, found


def test_provenance_runs_after_timing_under_strict_only() -> None:
    problem = load_problem(FIX / "problem_relu.py")
    strict = {s.name: s.requires for s in domain.validator_graph(problem, "strict").specs}
    assert strict["provenance"] == ("timing",) and "provenance" not in strict["timing"]
    assert "provenance" not in {s.name for s in domain.validator_graph(problem, "lenient").specs}


# -- load_inline, end to end (a torch extension build: one to two minutes) ----------------------

@pytest.fixture
def inline(cpu_config):
    def run(name: str, policy: str = "strict"):
        return _evaluate(cpu_config, (STRICT / f"inline_{name}.py").read_text(), policy)

    return run


@pytest.mark.slow
def test_load_inline_honest_is_valid_under_strict(inline) -> None:
    ev = inline("honest")
    assert ev.verdict.status == "valid", ev.verdict.report()
    d = ev.verdict.result("provenance").details
    assert d["own_time_fraction"] > 0.8 and d["own_functions"] == ["strict_relu_loop.relu_loop"], d


@pytest.mark.slow
def test_load_inline_dead_branch_fails_strict_and_passes_lenient(inline) -> None:
    prov = _provenance_failure(inline("dead_branch"))
    assert prov.details["case"] == "never_ran", prov.reason
    ev = inline("dead_branch", "lenient")
    assert ev.verdict.status == "valid", ev.verdict.report()


@pytest.mark.slow
def test_load_inline_warmup_and_token_slice_fail_strict(inline) -> None:
    assert _provenance_failure(inline("warmup_only")).details["case"] == "ran_only_outside"
    assert _provenance_failure(inline("token_slice")).details["case"] == "small_share"
