"""The judge: a process that never runs candidate code confirms every deciding output."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stratagem.core.design import Design
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
    design = Design.from_source((PAIRED / "same.py").read_text())
    ev = asyncio.run(Evaluator(cpu_config, ex, "cpu").evaluate(load_problem(PAIRED / "problem.py"), design,
                                                              with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    judged = ev.verdict.result("correctness").details["judge"]  # type: ignore[union-attr]
    seeds = list(ev.seeds)
    trials = [k for k in judged["checked"] if k.startswith("trial-")]
    assert len(trials) == 1 and trials[0] in {record.trial_key(s) for s in seeds}  # one, drawn by the judge
    assert record.params_key(seeds[0] + 7) in judged["checked"]
    assert record.offdist_key(seeds[0] + 11) in judged["checked"]
    timed = [k for k in judged["checked"] if record.parse_timed(k)]
    assert timed and sorted(timed) == sorted(ev.verdict.result("timing").details["timed_outputs_checked"])  # type: ignore[union-attr]
    assert 0 < judged["work_s"] <= judged["wall_s"]
    assert 0 <= judged["records_load_s"] <= judged["judging_s"] <= judged["after_worker_s"]  # its own account


def test_every_timed_call_of_every_attempt_has_inputs_of_its_own() -> None:
    """Re-timings included: a value-keyed cache filled in one attempt never hits in the next."""
    seeds = {record.timed_seed(123, a, c) for a in range(3) for c in range(100_000)}
    assert len(seeds) == 3 * 100_000
    assert record.parse_timed(record.timed_key(2, 41)) == (2, 41)
    assert record.parse_timed("trial-5") is None


def test_inputs_drawn_from_numpy_or_random_are_the_same_in_the_judge(cpu_config) -> None:
    """The judge makes every input from its seed in another process: a problem whose
    get_inputs() uses numpy's or Python's global generator must give the same values there
    (an honest candidate was rejected before every global generator was seeded)."""
    fix = Path(__file__).resolve().parents[1] / "fixtures" / "judge"
    ex = LocalExecutor.for_devices(["cpu"], cpu_config, {"PATH": "/usr/bin:/bin"})
    design = Design.from_source((fix / "numpy_inputs_candidate.py").read_text())
    ev = asyncio.run(Evaluator(cpu_config, ex, "cpu").evaluate(load_problem(fix / "numpy_inputs.py"), design,
                                                              with_baseline=False))
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.verdict.result("correctness").details["judge"]["checked"]  # type: ignore[union-attr]


def test_the_judge_prepares_each_timed_reference_as_its_record_appears(cpu_config, tmp_path) -> None:
    """While the worker finishes, the judge computes the reference's output for every timed
    call whose record has appeared (its inputs made from the call's seed), reading only the
    record's name; after the go file it compares against exactly what it would compute then."""
    import torch

    from stratagem.domains.pytorch import domain
    from stratagem.domains.pytorch.worker import judge, runtime
    from stratagem.domains.pytorch.worker.stages import Worker, prepare_device

    problem = load_problem(PAIRED / "problem.py")
    specs = [s for s in domain.validator_graph(problem).specs if s.placement == "worker"]
    req = prepare_device(domain.build_request(problem, None, specs, cpu_config).model_dump())
    w = Worker(req, tmp_path)
    w.stage_load()
    rec = tmp_path / "record"
    rec.mkdir()
    done: dict = {}
    judge._precompute_timed(w, rec, done)
    assert done == {}  # nothing recorded yet
    (rec / f"{record.timed_key(1, 7)}.pt").write_bytes(b"not read before the go file")
    (rec / "trial-5.pt").write_bytes(b"")
    judge._precompute_timed(w, rec, done)
    assert list(done) == [record.timed_key(1, 7)]  # timed calls only
    inputs, out = done[record.timed_key(1, 7)]
    p = w._programs(need_candidate=False)
    again = w._inputs(p, record.timed_seed(int(req["timing_seed"]), 1, 7))
    with torch.no_grad():
        expect = p.reference(*runtime.clone_inputs(again))
    assert torch.equal(inputs[0], again[0]) and torch.equal(out, expect)


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
