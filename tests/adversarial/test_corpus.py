"""The adversarial corpus: every cheating candidate must be rejected, by the validator (and
check) the manifest names, and every honest candidate must be valid.

Each case runs through the real harness (`Evaluator` on a CPU `LocalExecutor`, default
validator graph, no baseline). Static rejections cost no worker; the others spawn one worker
each (~2 s). A cheat the harness lets through is kept as a strict xfail that names the gap.
README.md beside this file is the detection table built from the same manifest.
"""

from __future__ import annotations

import asyncio
import glob
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratagem.config import EvaluationConfig, environment
from stratagem.core.graph import GraphRun, ValidatorGraph, ValidatorSpec
from stratagem.core.problem import Problem
from stratagem.core.verdict import ValidatorResult, Verdict
from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.settings import settings
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.outcome import interpret
from stratagem.evaluation.results import Evaluation
from stratagem.evaluation.service import Evaluator

HERE = Path(__file__).parent
CANDIDATES = HERE / "candidates"
HONEST = HERE / "honest"
PROBLEMS = HERE / "problems"

LINEAR, MEAN, SILU, NORM, CLAMP = "linear_relu", "row_mean", "silu", "layer_norm", "leaky_clamp"
LOOSE = "linear_relu_loose"

STATIC, LOAD, CORRECTNESS, INTEGRITY, SHAPES, TIMING = (
    "static_checks", "load", "correctness", "integrity", "shapes", "timing",
)


@dataclass(frozen=True)
class Cheat:
    problem: str
    validator: str
    """The validator that must be the first to fail."""
    check: str | None
    """static_checks: a `check` among details['rejections']; integrity: the reason's prefix
    (`refilled_inputs`, `candidate_first`, `repeat_agrees`, `harness_tampering`, `threads`,
    `processes`, ...);
    otherwise None."""
    pattern: str
    """The integrity.md Part 1 pattern number and name."""
    gap: str | None = None
    """Set when the harness lets the cheat through: the test is a strict xfail with this reason."""
    also: tuple[tuple[str, str | None], ...] = ()
    """Other (validator, check) pairs accepted as the first failure, only where which one comes
    first depends on what the CPU allocator hands back (documented in README.md) or on when the
    judge reads a record the cheat is still writing."""
    timeout_s: float | None = None
    """A longer run limit than the config's, for a cheat whose own work (not the harness's) can
    pass the 60 s limit on a loaded machine, where a timeout would read as a rejection."""
    min_timed_calls: int | None = None
    """`timing.min_reps` for a cheat that turns after a number of calls: the harness can only
    see the turn if it calls past it, and the fast config's 20 ms budget on a loaded machine
    falls to 10 pairs of one call (about 35 calls in the whole evaluation). Real budgets make
    hundreds of timed calls, each checked (`timed_outputs`)."""


GAP_FINGERPRINT = (
    "NEUTRALIZED, not rejected: a cache keyed on the input's values returns right answers, and "
    "every timed call now gets freshly generated inputs, so it never hits while timed "
    "(test_value_keyed_cache_gains_nothing_in_timing); the verdict stays valid"
)

CHEATS: dict[str, Cheat] = {
    # -- 5 reference passthrough / 17 reading the reference -------------------------------------
    "ref_import_problem.py": Cheat(LINEAR, STATIC, "reference_access", "5 reference passthrough"),
    "ref_model_name.py": Cheat(LINEAR, STATIC, "reference_access", "5 reference passthrough"),
    "ref_sys_modules.py": Cheat(LINEAR, STATIC, "reference_access", "5 reference passthrough"),
    "ref_gc.py": Cheat(LINEAR, STATIC, "reference_access", "5/17 reference via gc"),
    "ref_frame_walk.py": Cheat(LINEAR, STATIC, "reference_access", "17 reference via stack frames"),
    "ref_file_read.py": Cheat(LINEAR, STATIC, "io", "5/17 reference source read from disk"),
    # -- aliasing / dynamic code -----------------------------------------------------------------
    "dyn_importlib.py": Cheat(LINEAR, STATIC, "dynamic_code", "5 passthrough via importlib"),
    "dyn_dunder_import.py": Cheat(LINEAR, STATIC, "dynamic_code", "5 passthrough via __import__"),
    "dyn_exec.py": Cheat(LINEAR, STATIC, "dynamic_code", "5 passthrough via exec"),
    "dyn_eval.py": Cheat(LINEAR, STATIC, "dynamic_code", "5 passthrough via eval"),
    "dyn_getattr_alias.py": Cheat(LINEAR, STATIC, "dynamic_code", "5 passthrough via getattr alias"),
    # -- 4 monkey-patching -------------------------------------------------------------------------
    "monkey_allclose.py": Cheat(LINEAR, STATIC, "monkey_patch", "4 harness monkey-patch"),
    "monkey_tensor_eq.py": Cheat(LINEAR, STATIC, "monkey_patch", "4 harness monkey-patch"),
    "monkey_perf_counter.py": Cheat(LINEAR, STATIC, "monkey_patch", "4 timer monkey-patch"),
    "monkey_elapsed_time.py": Cheat(LINEAR, STATIC, "monkey_patch", "4 timer monkey-patch"),
    "monkey_builtins.py": Cheat(LINEAR, STATIC, "monkey_patch", "4/17 builtins monkey-patch"),
    "monkey_setattr_alias.py": Cheat(LINEAR, STATIC, "monkey_patch", "4 monkey-patch via setattr"),
    "monkey_module_dict.py": Cheat(LINEAR, STATIC, "dynamic_code", "4 monkey-patch via vars()"),
    "stealth_tensor_sub.py": Cheat(LINEAR, STATIC, "monkey_patch", "4 operator rebound via loop variable"),
    "stealth_reference_mul.py": Cheat(LINEAR, STATIC, "monkey_patch", "20 reference sabotage via type(...)"),
    "stealth_setattr_map.py": Cheat(LINEAR, STATIC, "monkey_patch", "4 operator rebound via map(setattr, ...)"),
    "stealth_reference_sabotage.py": Cheat(LINEAR, STATIC, "monkey_patch", "20 reference sabotage"),
    "harness_rebind_frames.py": Cheat(LINEAR, STATIC, "reference_access", "4/17 harness rebound via frames"),
    "stealth_tolerance.py": Cheat(LINEAR, STATIC, "reference_access", "17 harness data tampering"),
    # -- tampering the worker sees at run time too (issue 62, 3b; test_runtime_backstop) ---------
    "tamper_global_hook.py": Cheat(LINEAR, STATIC, "dynamic_code", "4 process-wide hook (names decoded at run time)"),
    "tamper_hook_globals.py": Cheat(LINEAR, STATIC, "dynamic_code", "4 process-wide hook via a method's __globals__"),
    "tamper_native_hook.py": Cheat(LINEAR, STATIC, "dynamic_code", "4 process-wide hook written by native code"),
    "tamper_nn_forward.py": Cheat(LINEAR, STATIC, "dynamic_code", "4/20 nn.Linear.forward rebound"),
    "tamper_input_attribute.py": Cheat(LINEAR, STATIC, "dynamic_code", "6 state on the harness's input tensor"),
    "tamper_input_storage.py": Cheat(LINEAR, STATIC, "mutable_state", "6 state in the input's storage"),
    "forge_response.py": Cheat(LINEAR, STATIC, "reference_access", "17 forged in-process verdict"),
    "forge_records_wrong.py": Cheat(LINEAR, STATIC, "reference_access", "17 forged verdict with forged records"),
    "forge_record_pickle.py": Cheat(LINEAR, STATIC, "reference_access", "17 code planted for the judge"),
    # -- 2 threads / 1 streams ---------------------------------------------------------------------
    "thread_late_writer.py": Cheat(LINEAR, STATIC, "threads", "2 thread injection"),
    "thread_futures.py": Cheat(LINEAR, STATIC, "threads", "2 thread injection"),
    "thread_asyncio_executor.py": Cheat(LINEAR, STATIC, "threads", "2 thread injection (asyncio)"),
    "thread_queue_listener.py": Cheat(LINEAR, INTEGRITY, "threads", "2 thread injection (logging QueueListener)"),
    "stream_side.py": Cheat(LINEAR, STATIC, "streams", "1 side stream"),
    # -- 6 output caches ---------------------------------------------------------------------------
    "cache_module_id.py": Cheat(LINEAR, STATIC, "mutable_state", "6 output cache (module, id)"),
    "cache_module_data_ptr.py": Cheat(LINEAR, STATIC, "mutable_state", "6 output cache (module, data_ptr)"),
    "cache_self_identity.py": Cheat(LINEAR, INTEGRITY, "refilled_inputs", "6 output cache (self, identity)"),
    "cache_self_data_ptr.py": Cheat(LINEAR, STATIC, "mutable_state", "6 output cache (self, data_ptr)"),
    "cache_self_version.py": Cheat(LINEAR, STATIC, "mutable_state", "6 output cache (self, identity + _version)"),
    "graph_replay_stale.py": Cheat(LINEAR, INTEGRITY, "candidate_first", "15 capture/replay on a stale input"),
    "cache_self_fingerprint.py": Cheat(LINEAR, TIMING, None, "6 output cache (self, content fingerprint)",
                                   gap=GAP_FINGERPRINT),
    "cache_sampled_values.py": Cheat(LINEAR, TIMING, None, "6 output cache (self, 16 sampled values)",
                                 gap=GAP_FINGERPRINT),
    "cache_scaled_input.py": Cheat(LINEAR, TIMING, None, "6 output cache (self, a scale of the last input)",
                               gap=GAP_FINGERPRINT),
    # it reads the global RNG's seed (torch.initial_seed): static global_flags since issue 46
    # (before, valid and neutralized: its timed predictions never hit the secret-keyed seeds)
    "cache_predicted_seeds.py": Cheat(LINEAR, STATIC, "global_flags", "6 output cache (self, inputs predicted from seeds)"),
    # -- I/O ---------------------------------------------------------------------------------------
    "io_file_cache.py": Cheat(LINEAR, STATIC, "io", "6 output cache in a file"),
    "io_socket.py": Cheat(LINEAR, STATIC, "io", "17 network I/O"),
    "io_dev_shm.py": Cheat(LINEAR, STATIC, "io", "6 output cache in /dev/shm"),
    # -- 12 global flags ---------------------------------------------------------------------------
    "flags_tf32.py": Cheat(LINEAR, STATIC, "global_flags", "12 precision downgrade (TF32)"),
    "flags_matmul_precision.py": Cheat(LINEAR, STATIC, "global_flags", "12 precision downgrade"),
    "flags_num_threads.py": Cheat(LINEAR, STATIC, "global_flags", "20 global flag (threads)"),
    "flags_manual_seed.py": Cheat(LINEAR, STATIC, "global_flags", "global RNG reseed"),
    "flags_flush_denormal.py": Cheat(LINEAR, STATIC, "global_flags", "12 global flag (denormals)"),
    # -- 5 try/except fallback, 17 process exit ----------------------------------------------------
    "try_fallback.py": Cheat(LINEAR, STATIC, "exception_fallback", "5 try/except fallback"),
    "exit_sys.py": Cheat(LINEAR, STATIC, "process_exit", "17 process exit"),
    "exit_os.py": Cheat(LINEAR, STATIC, "process_exit", "17 process exit"),
    # -- runtime: 8 input mutation, 3 fake outputs, 9 identity, 7 stale memory ----------------------
    "mutate_input_zero.py": Cheat(LINEAR, CORRECTNESS, None, "8 input mutation"),
    "out_tensor_subclass.py": Cheat(LINEAR, STATIC, "fake_tensor", "3 tensor subclass"),
    "out_always_equal.py": Cheat(LINEAR, STATIC, "fake_tensor", "3 always-equal object"),
    "out_meta.py": Cheat(LINEAR, CORRECTNESS, None, "3 meta tensor"),
    "out_alias_input.py": Cheat(SILU, CORRECTNESS, None, "9 identity / input alias"),
    "stale_empty_partial.py": Cheat(LINEAR, CORRECTNESS, None, "7 stale memory (half unwritten)"),
    "stale_reference_leftover.py": Cheat(SILU, CORRECTNESS, None, "7 stale memory (reference leftover)",
                                         also=((INTEGRITY, None),)),
    # -- 12 precision, 13 shapes, 19 nondeterminism, 10/11/14 shortcuts -------------------------------
    "precision_bf16.py": Cheat(LINEAR, CORRECTNESS, None, "12 precision downgrade (bf16)"),
    "shape_hardwired_view.py": Cheat(LINEAR, SHAPES, None, "13 shape specialisation"),
    "shape_hardwired_mean.py": Cheat(MEAN, SHAPES, None, "13 shape specialisation"),
    "shape_aligned_blocks.py": Cheat(MEAN, SHAPES, None, "13 shape specialisation (alignment)"),
    "timed_phase_quarter.py": Cheat(LINEAR, TIMING, None, "3 partial computation only while timed",
                                    min_timed_calls=60),  # it turns at its 41st call
    "layernorm_skip_affine.py": Cheat(NORM, CORRECTNESS, None, "14 skipped operation (initial parameters)"),
    "leaky_no_clamp.py": Cheat(CLAMP, CORRECTNESS, None, "14 skipped operation (visible input range)"),
    "nondeterministic_rand.py": Cheat(LINEAR, CORRECTNESS, None, "19 nondeterminism"),
    "nondeterministic_noise.py": Cheat(LINEAR, INTEGRITY, "repeat_agrees", "19 nondeterminism under tolerance"),
    "partial_subsample.py": Cheat(MEAN, CORRECTNESS, None, "11 partial computation"),
    "analytical_zeros.py": Cheat(MEAN, CORRECTNESS, None, "10 analytical shortcut"),
    "skip_op.py": Cheat(LINEAR, CORRECTNESS, None, "14 skipped operation"),
    # -- issue 23: the cheat classes reported on other kernel benchmarks in 2025-2026 --------------
    "nan_filled.py": Cheat(LINEAR, CORRECTNESS, None, "3 fake output: NaN everywhere"),
    "inf_filled.py": Cheat(LINEAR, CORRECTNESS, None, "3 fake output: infinity everywhere"),
    "nan_partial.py": Cheat(LINEAR, CORRECTNESS, None, "3/11 fake output: NaN where work was skipped"),
    "stale_reference_output.py": Cheat(LINEAR, CORRECTNESS, None, "7 stale memory (the reference's freed output)"),
    "ref_logging_frames.py": Cheat(LINEAR, STATIC, "reference_access", "5/17 reference via logging, bdb and inspect"),
    "ref_pydoc_locate.py": Cheat(LINEAR, STATIC, "reference_access", "5 reference via pydoc.locate"),
    "proc_fork_writer.py": Cheat(LINEAR, STATIC, "threads", "2 work after return: forked child"),
    "proc_fork_leftover.py": Cheat(LINEAR, STATIC, "threads", "2 work after return: a process outliving the call"),
    "proc_pool_async.py": Cheat(LINEAR, STATIC, "threads", "2 work after return: process pool, async handle"),
    "async_script_fork.py": Cheat(LINEAR, STATIC, "threads", "2 work after return: TorchScript fork"),
    "async_compilation_unit.py": Cheat(LINEAR, STATIC, "dynamic_code", "2 work after return: fork in TorchScript source"),
    "launch_cycle_batch.py": Cheat(LINEAR, TIMING, None, "one launch serves several timed calls"),
    "launch_lazy_buffer.py": Cheat(LINEAR, CORRECTNESS, None, "one launch serves two calls (lazy buffer)"),
    "warmup_replay_count.py": Cheat(LINEAR, TIMING, None, "warm-up work replayed while timed (call count)",
                                    min_timed_calls=80),  # it replays from its 49th call: on a loaded
    # machine the time budget alone gave fewer calls, so it computed honestly throughout and was valid
    "precision_fp16.py": Cheat(LINEAR, CORRECTNESS, None, "12 precision downgrade (fp16)"),
    "precision_fp16_accumulate.py": Cheat(LINEAR, CORRECTNESS, None, "12 reduced-precision accumulation"),
    # within the problem's declared 1e-2, but below the reference's precision: a downgrade (issue 57)
    "precision_fp16_loose.py": Cheat(LOOSE, CORRECTNESS, None, "12 precision downgrade within a loose tolerance"),
    "shape_guarded_init.py": Cheat(LINEAR, SHAPES, None, "13 shape specialisation behind a guard"),
    "shape_fixed_grid.py": Cheat(LINEAR, SHAPES, None, "13 shape specialisation (grid for the visible batch)"),
}

@dataclass(frozen=True)
class Honest:
    problem: str
    gap: str | None = None
    """Set when the harness rejects the honest candidate: a strict xfail with this reason."""


HONEST_CASES: dict[str, Honest] = {
    "inplace_fresh_buffers.py": Honest(LINEAR),
    "addmm_fused.py": Honest(LINEAR),
    "class_constant.py": Honest(LINEAR),
    "functional_linear.py": Honest(LINEAR),
    "baddbmm_batched.py": Honest(LINEAR),
    "module_helper.py": Honest(LINEAR),
    "docstring_mentions.py": Honest(LINEAR),
    "registered_buffer.py": Honest(LINEAR),
    "row_mean_dynamic.py": Honest(MEAN),
    "silu_functional.py": Honest(SILU),
    "layernorm_own_params.py": Honest(NORM),
    "leaky_fast_path.py": Honest(CLAMP),
    "own_module_hook.py": Honest(LINEAR),
    "compiled_cpu.py": Honest(LINEAR),
}

BACKSTOP: dict[str, Cheat] = {
    # If static_checks missed these, what would the worker alone conclude? (defence in depth)
    "monkey_perf_counter.py": Cheat(LINEAR, INTEGRITY, "harness_tampering", "4 timer monkey-patch"),
    "harness_rebind_frames.py": Cheat(LINEAR, INTEGRITY, "harness_tampering", "4/17 harness rebound via frames"),
    "stealth_setattr_map.py": Cheat(LINEAR, INTEGRITY, "harness_tampering", "4 Tensor.__sub__ rebound"),
    "stealth_reference_sabotage.py": Cheat(LINEAR, INTEGRITY, "harness_tampering", "20 reference sabotage"),
    # The worker's request is read-only: the attempt to loosen the tolerances raises.
    "stealth_tolerance.py": Cheat(LINEAR, "correctness", None, "17 harness data tampering"),
    # The forged response says every stage passed, but the judge (a process that never ran the
    # candidate) finds no recorded outputs behind the correctness trials it claims.
    "forge_response.py": Cheat(LINEAR, CORRECTNESS, "harness_tampering", "17 forged in-process verdict"),
    # Records behind the forged verdict: the judge runs the reference itself and compares. The
    # judge reads records as they come, and the cheat writes them in place (torch.save), never
    # whole-or-absent as the worker does: a record read mid-write is refused as tampering
    # ("not a recorded output") before any comparison. Which comes first is the judge's timing.
    "forge_records_wrong.py": Cheat(LINEAR, CORRECTNESS, "judge", "17 forged verdict with forged records",
                                    also=((CORRECTNESS, "harness_tampering"),)),
    # A pickle planted for the judge: records load with weights_only, which refuses it.
    "forge_record_pickle.py": Cheat(LINEAR, CORRECTNESS, "harness_tampering", "17 code planted for the judge"),
    # A forked helper still there after the call: the integrity stage lists this process's children
    # after every call (the writer in proc_fork_writer.py races the comparison, so it is not here).
    "proc_fork_leftover.py": Cheat(LINEAR, INTEGRITY, "processes", "2 work after return: a process outliving the call"),
    # Tampering seen at run time (issue 62): process-wide hooks and state on the inputs after the
    # candidate's first guarded call (a correctness trial); torch's modules rebound at import,
    # by the snapshot the integrity stage reads first.
    "tamper_global_hook.py": Cheat(LINEAR, CORRECTNESS, "harness_tampering", "4 process-wide hook"),
    "tamper_hook_globals.py": Cheat(LINEAR, CORRECTNESS, "harness_tampering", "4 process-wide hook via __globals__"),
    "tamper_native_hook.py": Cheat(LINEAR, CORRECTNESS, "harness_tampering", "4 process-wide hook by native code"),
    "tamper_input_attribute.py": Cheat(LINEAR, CORRECTNESS, "harness_tampering", "6 state on the input tensor"),
    "tamper_input_storage.py": Cheat(LINEAR, CORRECTNESS, "harness_tampering", "6 state in the input's storage"),
    "tamper_nn_forward.py": Cheat(LINEAR, INTEGRITY, "harness_tampering", "4/20 nn.Linear.forward rebound"),
}

_problems: dict[str, Problem] = {}


def problem(name: str) -> Problem:
    if name not in _problems:
        _problems[name] = load_problem(PROBLEMS / f"{name}.py")
    return _problems[name]


def evaluate(cfg: EvaluationConfig, problem_name: str, path: Path) -> Evaluation:
    executor = LocalExecutor.for_devices(["cpu"], cfg, environment())
    design = candidate_design(path.read_text(encoding="utf-8"))
    return asyncio.run(Evaluator(cfg, executor, "cpu").evaluate(problem(problem_name), design, with_baseline=False))


def evaluate_worker_only(cfg: EvaluationConfig, problem_name: str, path: Path) -> Verdict:
    """The worker's checking stages alone (load, correctness, integrity, shapes; not timing, to
    save time), as if static_checks had passed the candidate."""
    prob = problem(problem_name)
    graph = domain.validator_graph(prob)
    specs = [
        ValidatorSpec(s.name, tuple(r for r in s.requires if r != STATIC), s.placement)
        for s in graph.specs
        if s.placement == "worker" and s.name != TIMING
    ]
    design = candidate_design(path.read_text(encoding="utf-8"))
    limit = domain.timeout_s(prob, cfg)

    async def run() -> Verdict:
        executor = LocalExecutor.for_devices(["cpu"], cfg, environment())
        req = domain.build_request(prob, design, specs, cfg)
        _slot, sr = await executor.submit(req, limit, cfg.compile_timeout_s)
        out = interpret(specs, sr, req.request_id, limit, cfg.compile_timeout_s, req.compile_stage)
        graph_run = GraphRun(ValidatorGraph.of(specs), batch_placement="worker")
        graph_run.record(out.results)
        graph_run.record_missing(specs, "the worker ended before this stage ran")
        return Verdict(graph_run.results)

    return asyncio.run(run())


def _params(cases: dict[str, Cheat] | dict[str, Honest]) -> list[object]:
    out = []
    for name, case in sorted(cases.items()):
        marks = [pytest.mark.xfail(strict=True, reason=case.gap)] if case.gap else []
        out.append(pytest.param(name, marks=marks, id=name.removesuffix(".py")))
    return out


@pytest.fixture(autouse=True, scope="module")
def _no_dev_shm_leftovers():
    """io_dev_shm.py writes /dev/shm/stratagem_adv_* if it ever runs: remove what it left."""
    yield
    for p in glob.glob("/dev/shm/stratagem_adv_*.pt"):
        os.remove(p)


@pytest.mark.parametrize("name", _params(CHEATS))
def test_cheat_is_rejected(name: str, cpu_config: EvaluationConfig) -> None:
    case = CHEATS[name]
    cfg = cpu_config if case.timeout_s is None else cpu_config.model_copy(update={"timeout_s": case.timeout_s})
    if case.min_timed_calls is not None:
        timing = settings(cfg).timing.model_copy(update={"min_reps": case.min_timed_calls})
        cfg = cfg.model_copy(update={"timing": timing})
    ev = evaluate(cfg, case.problem, CANDIDATES / name)
    report = ev.verdict.report()
    assert ev.verdict.status == "invalid", f"{name} was {ev.verdict.status}:\n{report}"
    if case.gap:
        return  # any rejection closes the gap: the strict xfail then fails, so fix the manifest
    first = ev.verdict.failures[0]
    expected = [(case.validator, case.check), *case.also]
    assert any(_caught_by(first, v, c) for v, c in expected), (
        f"{name}: first failure {first.name} ({first.reason}), expected one of {expected}:\n{report}"
    )


@pytest.mark.parametrize("name", _params(BACKSTOP))
def test_runtime_backstop(name: str, cpu_config: EvaluationConfig) -> None:
    """Static checks bypassed: the worker's own validators must still reject the cheat."""
    case = BACKSTOP[name]
    verdict = evaluate_worker_only(cpu_config, case.problem, CANDIDATES / name)
    assert verdict.status == "invalid", f"{name} was {verdict.status}:\n{verdict.report()}"
    if case.gap:
        return
    first = verdict.failures[0]
    expected = [(case.validator, case.check), *case.also]
    assert any(_caught_by(first, v, c) for v, c in expected), f"{name}:\n{verdict.report()}"


def _caught_by(first: ValidatorResult, validator: str, check: str | None) -> bool:
    if first.name != validator:
        return False
    if check is None:
        return True
    if validator == STATIC:
        return check in [r["check"] for r in first.details.get("rejections", [])]
    return (first.reason or "").startswith(check + ":")


@pytest.mark.parametrize("name", _params(HONEST_CASES))
def test_honest_candidate_is_valid(name: str, cpu_config: EvaluationConfig) -> None:
    ev = evaluate(cpu_config, HONEST_CASES[name].problem, HONEST / name)
    assert ev.verdict.status == "valid", f"{name}:\n{ev.verdict.report()}"
    static = ev.verdict.result(STATIC)
    assert static is not None and static.outcome == "passed"


def test_manifest_covers_every_file() -> None:
    """No orphan fixtures, and no manifest entry without its file."""
    assert {p.name for p in CANDIDATES.glob("*.py")} == set(CHEATS)
    assert set(BACKSTOP) <= set(CHEATS)
    assert {p.name for p in HONEST.glob("*.py")} == set(HONEST_CASES)
    used = {c.problem for c in [*CHEATS.values(), *HONEST_CASES.values()]}
    assert {p.stem for p in PROBLEMS.glob("*.py")} == used


def test_readme_lists_every_candidate() -> None:
    readme = (HERE / "README.md").read_text(encoding="utf-8")
    missing = [n for n in [*CHEATS, *HONEST_CASES] if f"`{n}`" not in readme]
    assert not missing, f"README.md does not list {missing}"


@pytest.mark.parametrize("name", ["cache_self_fingerprint.py", "cache_sampled_values.py", "cache_scaled_input.py",
                                  "cache_predicted_seeds.py"])
@pytest.mark.timeout(2700)  # two evaluations, each under its own 1200 s limit (below)
def test_value_keyed_cache_gains_nothing_in_timing(cpu_config: EvaluationConfig, name: str, monkeypatch) -> None:
    """Every timed call gets freshly generated inputs (on the CPU too), so no cache keyed on
    values, sampled values or a scale of earlier inputs hits while timed: whatever the static
    checks make of them, their paired speedup is the honest one's, not 100x."""
    from stratagem.core.verdict import ValidatorResult as VR

    monkeypatch.setattr(domain, "run_static_checks", lambda *a, **k: VR("static_checks", "passed"))
    # cache_predicted_seeds prepares 6,600 inputs and outputs per new seed it sees, up to 40
    # seeds: seconds of work on an idle machine, over a minute on a loaded one (it was cut at
    # the 60 s run limit on a shared CI machine, at 300 s beside the whole suite and a CPU
    # hog: 17x its idle 17.6 s, and at 600 s beside both and other work, 2026-12-03); this test
    # is about its speedup, not its limit. One thread in both workers: beside a CPU hog on two
    # cores, torch's two threads wait on each other at every small op (27 s alone, over 1200 s
    # beside a hog); the cheat and the honest design are timed alike either way
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = cpu_config.model_copy(update={"timeout_s": 1200})
    cheat = evaluate(cfg, LINEAR, CANDIDATES / name)
    honest = evaluate(cfg, LINEAR, HONEST / "functional_linear.py")
    assert cheat.speedup is not None and honest.speedup is not None, cheat.verdict.report()
    # A cache hit is a dictionary lookup (~5x faster than the honest call here when it hit).
    assert cheat.speedup < 1.5 * honest.speedup, (cheat.speedup, honest.speedup)


def test_loose_tolerance_downgrade_fails_the_calibrated_rule(cpu_config: EvaluationConfig) -> None:
    """The fp16 matmul the fixed rule admits under a declared 1e-2 tolerance (a strict xfail in
    CHEATS) fails the calibrated rule: its error against the float64 anchor is over a thousand
    times eager's own (1.7e3x, 1.6e-3 against 9.3e-7)."""
    from stratagem.domains.pytorch.settings import CorrectnessConfig

    cfg = cpu_config.model_copy(update={"correctness": CorrectnessConfig(mode="calibrated")})
    ev = evaluate(cfg, LOOSE, CANDIDATES / "precision_fp16_loose.py")
    first = ev.verdict.failures[0] if ev.verdict.failures else None
    assert first is not None and first.name == CORRECTNESS, ev.verdict.report()
    assert "float64" in (first.reason or ""), ev.verdict.report()


def test_a_pickle_planted_for_the_judge_never_runs(cpu_config: EvaluationConfig) -> None:
    """The judge reads records as tensors only: the planted payload neither runs (its marker
    file never appears) nor stands for an output (the stage fails, naming the record)."""
    marker = Path("/tmp/stratagem_adv_judge_pwned")
    marker.unlink(missing_ok=True)
    verdict = evaluate_worker_only(cpu_config, "linear_relu", CANDIDATES / "forge_record_pickle.py")
    assert not marker.exists()
    first = verdict.failures[0]
    assert first.name == CORRECTNESS and "not a recorded output" in (first.reason or ""), verdict.report()
