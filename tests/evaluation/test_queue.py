"""The queue executor and `stratagem worker`, on the CPU: the folder protocol (atomic claims,
leases, first response wins, foreign files ignored with a warning, a resumed run finding its
own requests), an evaluation served by a worker process, a run served by one and then two
`--once` workers, and a worker killed mid-evaluation whose request is redone once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.api import make_evaluator, read_design
from stratagem.evaluation.queue import QueueDir, device_matches, new_id

ROOT = Path(__file__).resolve().parents[2]
ADV = ROOT / "tests/adversarial"
PROBLEM = ADV / "problems/linear_relu.py"
HONEST = ADV / "honest/addmm_fused.py"
FAST = {"device": "cpu", "baselines": ["eager"], "correctness_trials": 2,
        "timing": {"warmup_ms": 5, "budget_ms": 20, "min_reps": 3, "max_reps": 30}}
SRC = str(ROOT / "src")


def worker(queue: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, *sys.path])}
    return subprocess.Popen([sys.executable, "-m", "stratagem.evaluation.queue_worker", "--queue", str(queue),
                             "--device", "cpu", "--poll-s", "0.1", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def queue_cfg(queue: Path, **over):
    return load_config(None, {"evaluation": {**FAST, "executor": "queue", "queue_dir": str(queue),
                                             "queue_poll_s": 0.1, **over}}).evaluation


# -- the folder protocol ------------------------------------------------------------------------


def entry(rid: str, owner: str = "run-a", key: str = "k", device: str = "cpu") -> dict:
    return {"id": rid, "owner": owner, "key": key, "device": device, "request": {}, "settings": {}}


def test_one_claimer_wins_and_a_dead_claim_goes_back(tmp_path):
    q = QueueDir(tmp_path, lease_s=0.2)
    rid = q.put(entry(new_id()))
    a, b = q.claim("w1", "cpu"), q.claim("w2", "cpu")
    assert a is not None and a[0] == rid and b is None  # the rename is the claim
    assert q.requeue_expired(time.time()) == []  # the lease is fresh
    assert q.requeue_expired(time.time() + 1.0) == [rid]  # its worker stopped renewing it
    again = q.claim("w2", "cpu")
    assert again is not None and again[0] == rid


def test_files_another_process_removes_meanwhile_are_passed_over(tmp_path, monkeypatch):
    """A worker answering a claim removes its claim and lease while a run lists the folder:
    the run's listing and its look for dead claims go on without it (a suite run beside a CPU
    hog failed on a claim answered between the lease's read and the claim's stat)."""
    q = QueueDir(tmp_path, lease_s=0.2)
    rid = q.put(entry(new_id()))
    assert q.claim("w1", "cpu") is not None
    (tmp_path / "claimed" / f"{rid}.lease").unlink()  # as a worker killed before its first lease
    read = q._read

    def answered_meanwhile(path):  # the worker answers between the lease's read and the stat
        body = read(path)
        if path.suffix == ".lease":
            q.respond(rid, {"owner": "run-a", "key": "k", "result": {}})
        return body

    monkeypatch.setattr(q, "_read", answered_meanwhile)
    assert q.requeue_expired(time.time() + 1.0) == []
    monkeypatch.undo()
    # a listing whose files vanish as it sorts them still lists the others
    waiting = [q.put(entry(new_id(), key=f"k{i}")) for i in range(2)]
    gone = tmp_path / "requests" / f"{new_id()}.json"
    real = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda d: iter([gone, *real(d)]) if d.name == "requests" else real(d))
    assert q.find("run-a", "k1") == waiting[1]  # was None: the sort's stat of the gone file ended the listing
    claimed = q.claim("w1", "cpu")
    assert claimed is not None and claimed[0] == waiting[0]


def test_first_response_wins_and_is_read_once(tmp_path):
    q = QueueDir(tmp_path)
    rid = q.put(entry(new_id()))
    q.claim("w1", "cpu")
    q.respond(rid, {"owner": "run-a", "key": "k", "result": {"n": 1}})
    q.respond(rid, {"owner": "run-a", "key": "k", "result": {"n": 2}})  # a redo that finished late
    assert q.take(rid)["result"] == {"n": 1}
    assert q.take(rid) is None and (tmp_path / "consumed" / f"{rid}.json").exists()


def test_a_resumed_run_finds_its_own_requests_and_unread_responses(tmp_path):
    q = QueueDir(tmp_path)
    waiting = q.put(entry(new_id(), key="waiting"))
    answered = q.put(entry(new_id(), key="answered"))
    q.claim("w", "cpu")  # claims `waiting` (the oldest)
    q.claim("w", "cpu")
    q.respond(answered, {"owner": "run-a", "key": "answered", "result": {}})
    assert q.find("run-a", "waiting") == waiting
    assert q.find("run-a", "answered") == answered
    assert q.find("run-b", "answered") is None  # another run's requests are not mine
    q.take(answered)
    assert q.find("run-a", "answered") is None  # read: a new request is needed


def test_foreign_and_malformed_files_are_ignored_with_one_warning(tmp_path):
    said: list[str] = []
    q = QueueDir(tmp_path, warn=said.append)
    (tmp_path / "requests" / "notes.txt").write_text("hello")
    (tmp_path / "requests" / f"{new_id()}.json").write_text("{not json")
    (tmp_path / "requests" / f"{new_id()}.json").write_text(json.dumps({"version": 99, "id": "x"}))
    good = q.put(entry(new_id()))
    assert q.claim("w", "cpu")[0] == good
    assert q.claim("w", "cpu") is None
    q.claim("w", "cpu")
    assert len(said) == 3 and all("ignoring" in s for s in said)
    orphan = new_id()
    q.write_atomic(q.path("responses", orphan), {"version": 1, "id": orphan, "owner": "gone", "key": "k"})
    assert q.find("someone", "k") is None and q.path("responses", orphan).exists()  # kept, not taken


def test_pins_match_the_device_kind():
    assert device_matches("cuda", "cuda:1") and device_matches("cuda:1", "cuda:1")
    assert not device_matches("cuda:0", "cuda:1") and not device_matches("cuda", "cpu")


# -- served by worker processes -----------------------------------------------------------------


def test_an_evaluation_served_by_a_worker_process(tmp_path):
    q = tmp_path / "queue"
    w = worker(q, "--max-seconds", "240")
    try:
        ev = asyncio.run(make_evaluator(queue_cfg(q)).evaluate(load_problem(PROBLEM), read_design(HONEST, load_problem(PROBLEM)),
                                                             with_baseline=False))
    finally:
        w.kill()
        w.wait()
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.environment.get("physical_device") == "cpu" and ev.environment.get("host")
    # the candidate, and the device calibration when its peaks were not cached yet: all answered
    assert 1 <= len(list((q / "consumed").iterdir())) <= 2 and not list((q / "requests").iterdir())


@pytest.mark.timeout(600)  # its own deadline is 400 s: a search of three designs and a confirmation, by queue workers
def test_a_run_served_by_one_then_two_once_workers(tmp_path):
    sys.path.insert(0, str(ROOT / "tests/search"))
    from fakes import ScriptedPolicy

    from stratagem.search.loop import RETIMES_MAX, SearchLoop
    from stratagem.search.session import RunSession
    from stratagem.store.sqlite import RunStore

    q = tmp_path / "queue"
    honest = HONEST.read_text()
    variants = [honest + f"\nVARIANT = {v}\n" for v in (1, 2, 3)]  # three distinct programs
    cfg = load_config(None, {"evaluation": {**FAST, "executor": "queue", "queue_dir": str(q), "queue_poll_s": 0.1},
                             "search": {"iterations": 2, "patience": 5}})
    problem = load_problem(PROBLEM)
    done = threading.Event()
    out: dict = {}

    def run() -> None:
        with RunStore.open(tmp_path / "run") as store:
            store.add_problem(problem)
            store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
            ev = make_evaluator(cfg.evaluation)
            ev.executor.own(str(tmp_path / "run"))
            policy = ScriptedPolicy([[variants[0]], [variants[1], variants[2]]])
            out["outcome"] = asyncio.run(SearchLoop(RunSession(cfg, problem, store, ev, policy)).run())  # type: ignore[arg-type]
            out["evaluations"] = [(e.design_id, json.dumps(e.stability)) for e in store.evaluations()]
            out["rounds"] = store.confirmations()
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    started: list[subprocess.Popen] = []
    deadline = time.monotonic() + 400
    qd = QueueDir(q)
    while not done.is_set() and time.monotonic() < deadline:
        live = [p for p in started if p.poll() is None]
        want = 1 if len(started) < 1 else 2
        if qd.pending() and len(live) < want:
            started.append(worker(q, "--once"))
        time.sleep(0.1)
    for p in started:
        p.wait(timeout=60)
    assert done.is_set(), "the run did not finish"
    assert len(started) >= 2
    evs = out["evaluations"]
    retimed = len(evs) - 3
    # the three designs, each evaluated once; a second evaluation of one only as the loop's
    # re-timing of a design whose timing stayed unstable (a loaded machine), never a repeat
    assert len({d for d, _ in evs}) == 3, evs
    for design in {d for d, _ in evs}:
        mine = [stab for d, stab in evs if d == design]
        assert len(mine) <= 1 + RETIMES_MAX and all("unstable" in stab for stab in mine[:-1]), evs
    answered = [json.loads(f.read_text()) for f in (q / "consumed").iterdir()]
    # the baseline (measured again when its timing stayed unstable, as under load) and the
    # designs' evaluations (`evaluations` above), then the run's confirmation round: its three
    # blocks go through the queue like any request
    assert len(out["rounds"]) == 1 and out["rounds"][0]["blocks"] == 3
    assert 4 + retimed + 3 <= len(answered) <= 4 + retimed + 3 + 2, len(answered)
    assert len({a["worker"] for a in answered}) >= 2  # served by more than one worker


def test_a_worker_killed_mid_evaluation_has_its_request_redone_once(tmp_path):
    q = tmp_path / "queue"
    first = worker(q, "--lease-s", "2", "--max-seconds", "240")
    qd = QueueDir(q, lease_s=2)
    result: dict = {}

    def evaluate() -> None:
        result["ev"] = asyncio.run(make_evaluator(queue_cfg(q, queue_lease_s=2)).evaluate(
            load_problem(PROBLEM), read_design(HONEST, load_problem(PROBLEM)), with_baseline=False))

    t = threading.Thread(target=evaluate, daemon=True)
    t.start()
    def claimed() -> bool:
        return (q / "claimed").is_dir() and any((q / "claimed").glob("*.lease"))

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not claimed():
        time.sleep(0.05)
    assert claimed(), "the first worker never claimed the request"
    time.sleep(0.5)  # inside its evaluation
    first.send_signal(signal.SIGKILL)
    first.wait()
    second = worker(q, "--lease-s", "2", "--once")
    t.join(timeout=300)
    second.wait(timeout=60)
    assert "ev" in result and result["ev"].verdict.status == "valid", result
    answered = [json.loads(f.read_text()) for f in (q / "consumed").iterdir()]
    assert len(answered) == 1 and answered[0]["worker"].endswith(":cpu")
    assert str(second.pid) in answered[0]["worker"]  # redone by the second worker, once
    assert qd.pending() == 0


@pytest.mark.parametrize("bad", [["--device", "tpu"]])
def test_the_worker_names_a_bad_option(tmp_path, bad):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, *sys.path])}
    p = subprocess.run([sys.executable, "-m", "stratagem.evaluation.queue_worker", "--queue", str(tmp_path), *bad],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--device" in p.stderr


def test_a_run_killed_while_responses_arrive_resumes_without_asking_again(tmp_path):
    from queue_run import make

    q, run_dir = tmp_path / "queue", tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), SRC, *sys.path])}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "queue_run.py"), str(run_dir), str(q)], env=env)
    w1 = worker(q, "--max-seconds", "300")
    qd = QueueDir(q)

    def design_queued() -> bool:  # a request carrying a design's files (not the baseline) waits or runs
        for where in ("requests", "claimed"):
            for _, path in qd.entries(where):
                try:
                    if (json.loads(path.read_text()).get("request") or {}).get("files"):
                        return True
                except (OSError, ValueError):
                    pass
        return False

    deadline = time.monotonic() + 200
    while time.monotonic() < deadline and not design_queued():
        time.sleep(0.02)
    assert design_queued(), "the run never queued its design"
    proc.send_signal(signal.SIGKILL)  # killed while the worker answers it
    proc.wait()
    while time.monotonic() < deadline and qd.pending():
        time.sleep(0.1)  # the worker answers while the run is dead
    assert len(list((q / "responses").iterdir())) == 1  # the design's answer, unread
    w1.kill()
    w1.wait()

    loop, store = make(run_dir, q)
    w2 = worker(q, "--max-seconds", "200")  # for the resumed run's fresh baseline
    try:
        asyncio.run(loop.run())
    finally:
        w2.send_signal(signal.SIGTERM)
        w2.kill()
        w2.wait()
    evs = store.evaluations()
    assert len(evs) == len({e.design_id for e in evs}) == 1  # the killed run's design: once, not lost
    assert evs[0].status == "valid"  # the earlier request's answer, read as the request it answers
    answers = [json.loads(f.read_text()) for f in (q / "consumed").iterdir()]
    answered_by = [a["worker"] for a in answers]
    w1_id, w2_id = f":{w1.pid}:", f":{w2.pid}:"
    # the resumed run asked only for its baseline (and the device's peaks, which its now valid
    # design's roofline reads): the design's answer is w1's, taken, never asked again
    assert 1 <= sum(w2_id in a for a in answered_by) <= 2
    assert [w1_id in a["worker"] for a in answers if (a.get("request") or {}).get("files")] == [True]
    assert sum(w1_id in a for a in answered_by) >= 2  # the first baseline and the design
    assert not list((q / "responses").iterdir()) and not list((q / "requests").iterdir())


def test_the_worker_loads_without_pydantic_or_an_llm_library():
    env = {**os.environ, "PYTHONPATH": SRC}
    code = ("import sys; import stratagem.evaluation.queue_worker; "
            "bad = [m for m in ('pydantic', 'pydantic_ai', 'typer', 'rich', 'openai', 'anthropic', 'torch') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_blocks_of_a_confirmation_round_are_distinct_requests():
    """A request's key ignores its random parts (seeds), so a resumed run finds what it had
    asked; the blocks of one round differ only in their programs' order, which the key keeps."""
    from stratagem.domains.pytorch.domain import CONFIRM_GRAPH, build_request
    from stratagem.evaluation.queue_executor import request_key

    cfg = load_config(None, {}).evaluation
    problem = load_problem(PROBLEM)
    designs = [{"id": "a", "source": "x"}, {"id": "b", "source": "y"}]
    one = build_request(problem, None, CONFIRM_GRAPH, cfg, confirm=designs, confirm_order=["a", "b"])
    again = build_request(problem, None, CONFIRM_GRAPH, cfg, confirm=designs, confirm_order=["a", "b"])
    other = build_request(problem, None, CONFIRM_GRAPH, cfg, confirm=designs, confirm_order=["b", "a"])
    assert one.payload["timing_seed"] != again.payload["timing_seed"]  # new seeds each time
    assert request_key(one, "cpu") == request_key(again, "cpu")
    assert request_key(one, "cpu") != request_key(other, "cpu")


def test_a_worker_with_two_slots_evaluates_two_requests_at_once_in_slots_of_their_own(tmp_path, monkeypatch):
    """`--slots 2`: two claims in flight, each in its own slot (own caches, the device's one
    timing lock), every request answered once; `--slots 1` never overlaps."""
    from stratagem.evaluation import queue_worker

    monkeypatch.setenv("STRATAGEM_CACHE_DIR", str(tmp_path / "cache"))
    for slots in (2, 1):
        q = QueueDir(tmp_path / f"q{slots}")
        for i in range(4):
            q.put(entry(new_id(), key=f"k{i}"))
        busy, peak, seen = [0], [0], []
        lock = threading.Lock()

        async def fake(entry, slot, progress=None, spares=None, crew=None, busy=busy, peak=peak, seen=seen, lock=lock):
            with lock:
                busy[0] += 1
                peak[0] = max(peak[0], busy[0])
                seen.append((slot.index, str(slot.caches), str(slot.lock_path)))
            await asyncio.sleep(0.5)
            with lock:
                busy[0] -= 1
            return {"owner": entry["owner"], "key": entry["key"], "slot": {}, "result": {}}

        monkeypatch.setattr(queue_worker, "evaluate", fake)
        n = queue_worker.serve(q, "cpu", once=True, max_seconds=30, poll_s=0.05, log=lambda _m: None, slots=slots)
        assert n == 4 and len(list(q.entries("responses"))) == 4
        assert peak[0] == slots
        assert len({s[0] for s in seen}) == slots and len({s[1] for s in seen}) == slots  # caches of their own
        assert len({s[2] for s in seen}) == 1  # one timing lock for the device


def test_the_worker_refuses_zero_slots(tmp_path):
    p = subprocess.run([sys.executable, "-m", "stratagem.evaluation.queue_worker", "--queue", str(tmp_path),
                        "--slots", "0"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([SRC, *sys.path])})
    assert p.returncode == 2 and "--slots 0" in p.stderr
