"""A run waiting on its queue, and the ferry (docs/usage.md): the wait said as it stands (its
requests waiting or claimed, since when, when a worker last touched the queue), its bound
(`evaluation.queue_wait_s`: no sign of a worker for that long stops the run cleanly, and a
worker's lease renewals keep it going), the answers of a queue served elsewhere unpacked into
it (`QueueDir.accept`, `benchmarks/ferry_collect.py`), and a run stopped by the bound then
resumed while ferry calls (`benchmarks/ferry_serve.sh` on a copy of the queue) serve it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.domains import get_domain
from stratagem.domains.pytorch.problem import load_problem
from stratagem.errors import QueueStalled
from stratagem.evaluation.api import make_evaluator, read_design
from stratagem.evaluation.progress import stage_events
from stratagem.evaluation.queue import QueueDir, new_id

ROOT = Path(__file__).resolve().parents[2]
ADV = ROOT / "tests/adversarial"
PROBLEM = ADV / "problems/linear_relu.py"
HONEST = ADV / "honest/addmm_fused.py"
FAST = {"device": "cpu", "baselines": ["eager"], "correctness_trials": 2,
        "timing": {"warmup_ms": 5, "budget_ms": 20, "min_reps": 3, "max_reps": 30}}
sys.path.insert(0, str(ROOT / "benchmarks"))


def queue_cfg(queue: Path, **over):
    return load_config(None, {"evaluation": {**FAST, "executor": "queue", "queue_dir": str(queue),
                                             "queue_poll_s": 0.05, **over}}).evaluation


def request_of(cfg):
    problem = load_problem(PROBLEM)
    task = get_domain("pytorch").open(problem, cfg)
    return task.build_request(read_design(HONEST, problem), task.validator_graph().specs[1:3])


def test_a_wait_no_worker_serves_is_said_and_stops_at_its_bound(tmp_path):
    cfg = queue_cfg(tmp_path / "q", queue_wait_s=0.6)
    ex = make_evaluator(cfg).executor
    stages: list[str] = []
    t0 = time.monotonic()
    with pytest.raises(QueueStalled) as e:
        asyncio.run(ex.submit(request_of(cfg), 60.0, on_event=stage_events(stages.append)))
    assert 0.6 <= time.monotonic() - t0 < 10
    assert stages and stages[0].startswith("waiting for a queue worker: queued at ")
    assert "this run's requests: 1 waiting, 0 claimed" in stages[0]
    assert "no worker has touched the queue yet" in stages[0]
    assert "the run stops after 0.6 s without one (evaluation.queue_wait_s)" in stages[0]
    msg = str(e.value)
    assert "evaluation.queue_wait_s = 0.6 s" in msg and str(tmp_path / "q") in msg and "1 of this run's" in msg
    assert QueueDir(tmp_path / "q").count("requests") == 1  # left queued for the resumed run
    with pytest.raises(QueueStalled):  # the invocation stops: a later request does not wait again
        asyncio.run(ex.submit(request_of(cfg), 60.0))


def test_a_worker_that_renews_its_lease_keeps_the_wait_going(tmp_path):
    """Idle is no sign of a worker, not a long evaluation: a claimed request whose worker renews
    its lease waits past the bound, is said as claimed, and its answer ends the wait."""
    q = tmp_path / "q"
    cfg = queue_cfg(q, queue_wait_s=0.8)
    ex = make_evaluator(cfg).executor
    qd = QueueDir(q)
    stages: list[str] = []

    def worker() -> None:  # a scripted worker: claims, renews for 2.5 s, answers with an error
        while (got := qd.claim("scripted", "cpu")) is None:
            time.sleep(0.05)
        rid, entry = got
        for _ in range(10):
            time.sleep(0.25)
            qd.renew(rid, "scripted")
        qd.respond(rid, {"owner": entry["owner"], "key": entry["key"], "error": "scripted: no evaluation"})

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    t0 = time.monotonic()
    with pytest.raises(Exception, match="scripted: no evaluation"):  # the worker's answer, not a stall
        asyncio.run(ex.submit(request_of(cfg), 60.0, on_event=stage_events(stages.append)))
    t.join()
    assert time.monotonic() - t0 > 2.0
    assert any(s.startswith("claimed by a queue worker") and "0 waiting, 1 claimed" in s
               and "a worker last touched the queue at " in s for s in stages), stages


def test_a_suites_queue_line_says_what_waits_and_when_a_worker_was_seen(tmp_path):
    from stratagem.evaluation.queue_executor import queue_line

    q = QueueDir(tmp_path / "q")
    assert queue_line(q, time.time()) is None  # nothing waits: nothing said
    for _ in range(3):
        q.put({"id": new_id(), "owner": "suite", "key": "k", "device": "cpu", "request": {}, "settings": {}})
    text = queue_line(q, time.time() + 300, 1800.0)
    assert text is not None and f"queue {q.root}: 3 requests waiting (the oldest queued at " in text
    assert "5 min ago), 0 claimed; no worker has touched it yet; runs stop after 1800 s" in text
    q.claim("w", "cpu")
    text = queue_line(q, time.time())
    assert text is not None and "2 requests waiting" in text and "1 claimed; a worker last touched it at" in text


def test_answers_of_a_queue_served_elsewhere_are_unpacked_once(tmp_path):
    from ferry_collect import collect

    q = QueueDir(tmp_path / "q")
    a, b, c = new_id(), new_id(), new_id()
    for rid in (a, b, c):
        q.put({"id": rid, "owner": "run", "key": rid, "device": "cpu", "request": {}, "settings": {}})
    answers = tmp_path / "served" / "responses"
    answers.mkdir(parents=True)
    for rid in (a, b):
        (answers / f"{rid}.json").write_text(json.dumps({"version": 1, "id": rid, "owner": "run", "key": rid,
                                                         "result": {}, "worker": "gpu-host:1:cuda:0"}))
    (answers / "notes.txt").write_text("not an answer")
    archive = tmp_path / "fq.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(answers, arcname="responses")
        tar.add(answers / "notes.txt", arcname="../escape.json")
    n = collect(tmp_path / "q", archive)
    assert n == {"kept": 2, "already_answered": 0, "skipped": 2, "waiting": 1}
    assert {p.stem for _, p in q.entries("requests")} == {c}  # served requests removed, the other waits
    assert q.take(a) is not None and q.take(b) is not None
    assert not (tmp_path / "escape.json").exists()
    again = collect(tmp_path / "q", archive)  # the same call unpacked twice: nothing answered twice
    assert again["kept"] == 0 and again["already_answered"] == 2 and not list((tmp_path / "q/responses").iterdir())


def ferry_call(queue: Path, device_root: Path, out: Path) -> str:
    """One device call of the ferry on this machine: the queue's requests copied (what a device
    call carries), served there by benchmarks/ferry_serve.sh, its archive unpacked back here."""
    fq = device_root / "fq"
    shutil.rmtree(fq / "requests", ignore_errors=True)
    shutil.copytree(queue / "requests", fq / "requests")
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "FQ": str(fq), "OUT": str(out), "DEVICE": "cpu", "MAX_S": "200", "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run(["bash", str(ROOT / "benchmarks/ferry_serve.sh")], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=260)
    assert p.returncode == 0, p.stdout + p.stderr
    c = subprocess.run([sys.executable, str(ROOT / "benchmarks/ferry_collect.py"), "--queue", str(queue),
                        str(out / "fq.tgz")], env=env, capture_output=True, text=True, timeout=60)
    assert c.returncode == 0, c.stdout + c.stderr
    return p.stdout + c.stdout


@pytest.mark.timeout(600)
def test_a_run_stopped_by_the_bound_is_resumed_and_finished_by_ferry_calls(tmp_path):
    sys.path.insert(0, str(ROOT / "tests/search"))
    from fakes import ScriptedPolicy

    from stratagem.search.loop import SearchLoop
    from stratagem.search.session import RunSession
    from stratagem.store.sqlite import RunStore

    q, run_dir = tmp_path / "fq", tmp_path / "run"
    problem = load_problem(PROBLEM)

    def loop_of(store: RunStore, wait_s: float, view=None):
        cfg = load_config(None, {"evaluation": {**FAST, "executor": "queue", "queue_dir": str(q), "queue_poll_s": 0.1,
                                                "queue_wait_s": wait_s},
                                 "search": {"iterations": 1, "confirm_top": 0}})
        if store.run() is None:
            store.add_problem(problem)
            store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
        ev = make_evaluator(cfg.evaluation)
        ev.executor.own(str(run_dir.resolve()))
        policy = ScriptedPolicy([[HONEST.read_text()]] if not store.iterations() else [])
        return SearchLoop(RunSession(cfg, problem, store, ev, policy, view))  # type: ignore[arg-type]

    lines: list[str] = []

    class View:
        def update(self, p) -> None:
            lines.extend(f.line(time.time()) for f in p.inflight.values())

    with RunStore.open(run_dir) as store:  # nothing serves the queue: the run stops at its bound
        with pytest.raises(QueueStalled):
            asyncio.run(loop_of(store, 1.0, View()).run())
        run = store.run()
        assert run is not None and run.status == "interrupted" and "waiting for a queue worker" in run.stop_reason
    assert any(ln.startswith("reference baselines: waiting for a queue worker") for ln in lines), lines
    assert QueueDir(q).count("requests") == 1

    done = threading.Event()
    out: dict = {}

    def resume() -> None:  # what `stratagem resume` does, with a bound above a ferry call's length
        try:
            with RunStore.open(run_dir) as store:
                out["outcome"] = asyncio.run(loop_of(store, 300.0).run())
                out["evaluations"] = store.evaluations()
                out["status"] = store.run().status  # type: ignore[union-attr]
        finally:
            done.set()

    t = threading.Thread(target=resume, daemon=True)
    t.start()
    calls = 0
    deadline = time.monotonic() + 500
    while not done.is_set() and time.monotonic() < deadline:
        if QueueDir(q).count("requests"):
            ferry_call(q, tmp_path / "device", tmp_path / "out")
            calls += 1
        time.sleep(0.2)
    t.join(timeout=30)
    assert out.get("status") == "finished", out
    assert [e.status for e in out["evaluations"]] == ["valid"]
    assert calls >= 2  # the stopped run's baseline, then the design (and the device's peaks)
    qd = QueueDir(q)
    assert qd.count("requests") == 0 and qd.count("responses") == 0
    answered = [json.loads(f.read_text()) for f in (q / "consumed").iterdir()]
    assert answered and all(":cpu" in a["worker"] for a in answered)


def test_the_cli_stops_a_run_no_worker_serves_with_exit_75_and_says_how_to_go_on(tmp_path, capsys):
    from stratagem.cli import main
    from stratagem.store.sqlite import RunStore

    run_dir, q = tmp_path / "run", tmp_path / "fq"
    code = main(["run", str(PROBLEM), "--device", "cpu", "--policy", "recipes", "--iterations", "1",
                 "--queue", str(q), "--queue-wait", "0.5", "--run-dir", str(run_dir)])
    out = capsys.readouterr().out
    assert code == 75, out
    assert "stopped: no queue worker touched" in " ".join(out.split()) and "evaluation.queue_wait_s = 0.5 s" in out
    assert f"stratagem resume {run_dir}" in out
    with RunStore.read(run_dir) as store:
        run = store.run()
        assert run is not None and run.status == "interrupted" and run.config["evaluation"]["queue_wait_s"] == 0.5
    assert main(["run", str(PROBLEM), "--queue", str(q), "--queue-wait", "0"]) == 2  # named, not a traceback
    bad = capsys.readouterr()
    assert "--queue-wait" in bad.out + bad.err


def test_redteam_evaluates_through_a_queue_too(tmp_path, capsys):
    """A red-team run on a GPU that only batch calls reach goes through the ferry like a search:
    its evaluations are queue requests, and with no worker it stops cleanly (exit 75)."""
    from stratagem.cli import main

    run_dir, q = tmp_path / "run", tmp_path / "fq"
    code = main(["redteam", str(PROBLEM), "--device", "cpu", "--model", "test", "--max-queries", "1",
                 "--queue", str(q), "--queue-wait", "0.5", "--run-dir", str(run_dir)])
    out = capsys.readouterr().out
    assert code == 75, out
    assert f"stratagem resume {run_dir}" in out
    assert list((q / "requests").iterdir())  # the baselines' request waits for a worker
