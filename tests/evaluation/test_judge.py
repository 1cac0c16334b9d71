"""The judge: a process that never runs candidate code confirms every deciding output."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.worker import record
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator

PAIRED = Path(__file__).resolve().parents[1] / "fixtures" / "paired"


def test_an_honest_evaluation_is_confirmed_call_by_call(cpu_config) -> None:
    """One correctness trial drawn by the judge, the randomised-parameters and off-distribution
    trials, and every timed call drawn for checking; the judge's work is counted apart from
    its wait for the worker."""
    ex = LocalExecutor.for_devices(["cpu"], cpu_config, {"PATH": "/usr/bin:/bin"})
    design = candidate_design((PAIRED / "same.py").read_text())
    ev = asyncio.run(Evaluator(cpu_config, ex, "cpu").evaluate(load_problem(PAIRED / "problem.py"), design,
                                                              with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    judged = ev.verdict.result("correctness").details["judge"]  # type: ignore[union-attr]
    seeds = list(ev.seeds)
    trials = [k for k in judged["checked"] if k.startswith("trial-")]
    assert len(trials) == 1 and trials[0] in {record.trial_key(s) for s in seeds}  # one, drawn by the judge
    assert record.params_key(seeds[0] + 7) in judged["checked"]
    assert record.offdist_key(seeds[0] + 11, 16.0) in judged["checked"]
    assert record.offdist_key(seeds[0] + 11, 1e-3) in judged["checked"]
    timed = [k for k in judged["checked"] if record.parse_timed(k)]
    assert timed and sorted(timed) == sorted(ev.verdict.result("timing").details["timed_outputs_checked"])  # type: ignore[union-attr]
    assert 0 < judged["work_s"] <= judged["wall_s"]
    # its own account: records are checked as they arrive, the rest after the worker's end
    assert 0 <= judged["judging_s"] <= judged["after_worker_s"]
    assert 0 <= judged["records_load_s"] <= judged["judging_s"] + judged["before_worker_end_s"]


def test_every_timed_call_of_every_attempt_has_inputs_of_its_own() -> None:
    """Re-timings included: a value-keyed cache filled in one attempt never hits in the next."""
    seeds = {record.timed_seed(123, a, c) for a in range(3) for c in range(100_000)}
    assert len(seeds) == 3 * 100_000
    assert record.parse_timed(record.timed_key(2, 41)) == (2, 41)
    assert record.parse_timed("trial-5") is None


def _evaluate_fixture(cfg, folder: str, problem: str, candidate: str):
    fix = Path(__file__).resolve().parents[1] / "fixtures" / folder
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    design = candidate_design((fix / candidate).read_text())
    return asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(fix / problem), design, with_baseline=False))


def test_inputs_drawn_from_numpy_or_random_are_the_same_in_the_judge(cpu_config) -> None:
    """The judge makes every input from its seed in another process: a problem whose
    get_inputs() uses numpy's or Python's global generator must give the same values there
    (an honest candidate was rejected before every global generator was seeded)."""
    ev = _evaluate_fixture(cpu_config, "judge", "numpy_inputs.py", "numpy_inputs_candidate.py")
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.verdict.result("correctness").details["judge"]["checked"]  # type: ignore[union-attr]


def _judging(cpu_config, tmp_path):
    from stratagem.domains.pytorch import domain
    from stratagem.domains.pytorch.worker import judge
    from stratagem.domains.pytorch.worker.stages import Worker, prepare_device

    problem = load_problem(PAIRED / "problem.py")
    specs = [s for s in domain.validator_graph(problem).specs if s.placement == "worker"]
    req = prepare_device(domain.build_request(problem, None, specs, cpu_config).model_dump())
    w = Worker(req, tmp_path)
    w.stage_load()
    rec = tmp_path / "record"
    rec.mkdir()
    return w, rec, judge.Judging(w, rec, [])


def test_the_judge_checks_sampled_file_records_as_they_arrive(cpu_config, tmp_path) -> None:
    """While the worker runs, the judge compares each sampled record as it appears (a wrong
    one becomes a finding), leaves the trials it did not draw unread, and never reads a file
    still being written (the worker writes to a temporary name and renames)."""
    import torch

    from stratagem.domains.pytorch.worker import runtime

    w, rec, j = _judging(cpu_config, tmp_path)
    p = w.loaded(need_candidate=False)
    j.poll()
    assert j.checked == {}  # nothing recorded yet
    key = record.timed_key(1, 7)
    inputs = w.make_inputs(p, record.timed_seed(int(w.req["timing_seed"]), 1, 7))
    with torch.no_grad():
        right = p.reference(*runtime.clone_inputs(inputs))
    (rec / f"{key}.pt.tmp").write_bytes(b"half a file")  # still being written: not read
    j.poll()
    assert key not in j.checked
    recorder = record.Recorder(rec)
    recorder.save(key, right)
    unsampled = next(s for s in j.seeds if record.trial_key(s) != j.sampled_trial)
    recorder.save(record.trial_key(unsampled), right)  # another call's output: wrong, but not drawn
    recorder.save(record.timed_key(0, 3), right + 1)  # wrong
    j.poll()
    assert j.checked == {key: "file", record.timed_key(0, 3): "file"}
    [finding] = j.findings
    assert finding.stage == "timing" and "timed call 3 (attempt 0)" in finding.reason


def test_an_ipc_record_is_answered_and_one_the_judge_cannot_read_falls_back_to_a_file(
        cpu_config, tmp_path, monkeypatch) -> None:
    """The worker's side of the CUDA IPC hand-off, with the transport faked on the CPU: the
    worker waits for the judge's answer; an answer that says the record was unreadable, or
    none within the limit, makes this and every later record a file, with the reason kept."""
    import threading

    import torch

    from stratagem.domains.pytorch.worker import ipc

    rec = tmp_path / "record"
    monkeypatch.setattr(ipc, "export", lambda out: ({"value": "fake"}, [out]))
    monkeypatch.setattr(record.runtime, "synchronize", lambda _device: None)
    answers = iter(["received", "unreadable: CUDA IPC open failed"])

    def judge_side() -> None:
        for _ in range(2):
            while not (waiting := record.ipc_keys(rec)):
                threading.Event().wait(0.005)
            record.answer_ipc(rec, waiting[0], next(answers))
            (rec / f"{waiting[0]}{record.IPC_SUFFIX}").unlink()

    t = threading.Thread(target=judge_side, daemon=True)
    t.start()
    r = record.Recorder(rec, "cuda:0")
    r.save("trial-1", torch.ones(3))
    r.save("trial-2", torch.ones(3))
    r.save("trial-3", torch.ones(3))
    t.join(5)
    assert r.transports == {"trial-1": "ipc", "trial-2": "file", "trial-3": "file"}
    assert "could not read" in (r.ipc_off or "")
    assert record.keys(rec) == ["trial-2", "trial-3"]
    monkeypatch.setattr(record, "ANSWER_TIMEOUT_S", 0.05)
    silent = record.Recorder(tmp_path / "silent", "cuda:0")
    silent.save("trial-1", torch.ones(3))
    assert silent.transports == {"trial-1": "file"} and "did not answer" in (silent.ipc_off or "")
    assert not record.ipc_keys(tmp_path / "silent")  # withdrawn: the judge reads the file


def test_a_forged_ipc_description_is_refused_before_any_mapping() -> None:
    """The judge builds a tensor on an IPC handle only after checking the description: an
    unknown dtype, a tensor reaching past its storage or a malformed container is an error
    (the judge then refuses the record), never a read out of bounds or code run."""
    import pytest

    from stratagem.domains.pytorch.worker import ipc

    good = {"dtype": "float32", "shape": [4], "stride": [1], "offset": 0, "device": 0, "handle": "", "size_bytes": 16,
            "offset_bytes": 0, "ref_counter": "", "ref_counter_offset": 0, "event": "", "event_sync": False}
    for bad in ({"tensor": {**good, "dtype": "object"}}, {"tensor": {**good, "shape": [5]}},
                {"tensor": {**good, "offset": 1}}, {"tensor": {**good, "stride": [-1]}},
                {"list": "x"}, {"tensor": good, "list": []}, {"pickle": "..."}):
        with pytest.raises(ValueError, match="malformed"):
            ipc.open_output(bad, "cpu")
    assert ipc.open_output({"tuple": [{"value": 3}, {"empty": {"shape": [0, 2], "dtype": "int64"}}]}, "cpu")[0] == 3


def test_timed_seeds_are_keyed_hashes_no_candidate_can_predict() -> None:
    """A candidate can read the seed of its inputs (`torch.initial_seed()`); the seeds of other
    timed calls and of the warm-up sets must not follow from it: no fixed offset relates any
    two, a different secret gives unrelated seeds, and the judge derives the same ones."""
    secret = 0x5EC2E7
    timed = [record.timed_seed(secret, a, c) for a in range(2) for c in range(200)]
    warm = [record.warm_seed(secret, i) for i in range(3)]
    seeds = timed + warm
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 2**record.SEED_BITS for s in seeds)
    steps = {b - a for a, b in zip(timed, timed[1:], strict=False)}
    assert len(steps) > 300  # no constant or repeating stride between consecutive calls
    assert secret not in seeds and all(abs(s - w) > 10**6 for s in timed for w in warm)
    other = [record.timed_seed(secret + 1, a, c) for a in range(2) for c in range(200)]
    assert not set(other) & set(timed)
    assert record.timed_seed(secret, 1, 7) == timed[207]  # deterministic: the judge's inputs match


def test_a_reference_whose_closures_hold_its_modules_is_randomised_in_place(cpu_config) -> None:
    """The randomised-parameters trial loads its random state into the reference itself and
    restores it, so a model that calls a submodule through a closure (KernelBench's
    MiniGPTBlock) computes with the random weights everywhere: its own code, renamed, passes
    in the worker and in the judge. (A deep copy kept the closure on the original weights and
    failed this honest candidate on every element.)"""
    ev = _evaluate_fixture(cpu_config, "closure", "problem.py", "honest.py")
    assert ev.verdict.status == "valid", ev.verdict.report()
    c = ev.verdict.result("correctness")
    assert c is not None and c.details["randomised_parameters"]["mapped"] == "by key"
    assert any(k.startswith("params-") for k in c.details["judge"]["checked"])
