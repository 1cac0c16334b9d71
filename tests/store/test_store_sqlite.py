"""The SQLite run store: round trips, WAL, content-addressed artifacts, idempotence, schema guard."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.errors import StoreError
from stratagem.store.records import (
    SCHEMA_VERSION,
    EvaluationRecord,
    MeasurementRecord,
    ReviewRecord,
)
from stratagem.store.sqlite import RunStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SRC = (FIXTURES / "candidates" / "good_addmm.py").read_text(encoding="utf-8")


@pytest.fixture
def problem():
    return load_problem(FIXTURES / "problem_linear.py")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def store(run_dir):
    s = RunStore.open(run_dir)
    yield s
    s.close()


def raw(run_dir: Path, sql: str, *args):
    conn = sqlite3.connect(run_dir / "run.db")
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def evaluation(problem_id: str, design_id: str, **kw) -> EvaluationRecord:
    base = dict(
        design_id=design_id,
        problem_id=problem_id,
        status="valid",
        device="cuda:0",
        runtime_ms=0.1 + 0.2,  # deliberately not representable exactly
        speedup=3.25,
        validators=[
            {"name": "static_checks", "outcome": "passed", "reason": None, "kind": None,
             "details": {"checks": ["model_new"]}, "duration_s": 0.001},
            {"name": "correctness", "outcome": "passed", "reason": None, "kind": None,
             "details": {"trials": [{"seed": 1, "max_abs": 1e-7}]}, "duration_s": 1.5},
        ],
        environment={"torch": "2.5.0", "device_name": "H200", "threads": 16},
        seeds=[2**47 + 3, 17, 0],
        reference_ms={"eager": 1.0, "compile": None},
        measurements=[
            MeasurementRecord(name="runtime", unit="ms", median=0.3, q1=0.29, q3=0.31,
                              samples=[0.30000000000000004, 0.29, 0.31, 1e-9]),
            MeasurementRecord(name="reference_eager", unit="ms", median=1.0, q1=0.9, q3=1.1,
                              samples=[1.0, 0.9, 1.1]),
        ],
        created_at=time.time(),
    )
    base.update(kw)
    return EvaluationRecord(**base)  # type: ignore[arg-type]


def test_problem_round_trip(store, problem):
    rec = store.add_problem(problem)
    assert rec.id == problem.id
    [got] = store.problems()
    assert got == rec
    assert (got.name, got.domain, got.path) == ("problem_linear", "pytorch", problem.path)
    assert store.get_artifact(got.source_hash) == problem.source


def test_design_round_trip_with_parents_and_provenance(store, problem):
    store.add_problem(problem)
    parent = candidate_design("class ModelNew: pass\n")
    store.add_design(problem.id, parent)
    d = candidate_design(
        SRC, parent_ids=(parent.id,), provenance={"role": "coder", "model": "m-1", "temp": 0.7,
                                                  "tags": ["a", "b"]},
    )
    rec = store.add_design(problem.id, d)
    got = store.design(d.id)
    assert got == rec
    assert got.parent_ids == [parent.id]
    assert got.provenance == {"role": "coder", "model": "m-1", "temp": 0.7, "tags": ["a", "b"]}
    assert got.problem_id == problem.id
    assert set(got.files) == {"candidate.py"}
    assert store.design_source(d.id) == SRC
    assert [x.id for x in store.designs(problem.id)] == [parent.id, d.id]
    assert store.designs("other-problem") == []
    assert store.design("missing") is None
    with pytest.raises(StoreError):
        store.design_source("missing")
    with pytest.raises(StoreError):
        store.design_source(d.id, "helper.py")


def test_evaluation_round_trip(store, problem):
    store.add_problem(problem)
    d = candidate_design(SRC)
    store.add_design(problem.id, d)
    rec = evaluation(problem.id, d.id)
    eid = store.add_evaluation(rec)
    second = store.add_evaluation(evaluation(problem.id, d.id, status="invalid", runtime_ms=None,
                                             speedup=None, measurements=[]))
    assert second > eid
    got = store.evaluations(d.id)
    assert [g.id for g in got] == [eid, second]
    assert got[0].model_dump(exclude={"id"}) == rec.model_dump(exclude={"id"})
    assert got[0].measurements[0].samples == [0.30000000000000004, 0.29, 0.31, 1e-9]
    assert got[0].seeds[0] == 2**47 + 3
    assert got[0].reference_ms == {"eager": 1.0, "compile": None}
    assert got[1].status == "invalid" and got[1].measurements == [] and got[1].runtime_ms is None
    assert store.evaluations() == got
    assert store.evaluations("other") == []


def test_wal_mode(store, run_dir):
    assert raw(run_dir, "PRAGMA journal_mode") == [("wal",)]


def test_artifacts_content_addressed_and_deduplicated(store, run_dir):
    h1 = store.put_artifact("hello ✓")
    h2 = store.put_artifact("hello ✓")
    assert h1 == h2 == hashlib.sha256("hello ✓".encode()).hexdigest()
    path = run_dir / "artifacts" / h1[:2] / h1
    assert path.read_text(encoding="utf-8") == "hello ✓"
    h3 = store.put_artifact("other")
    assert h3 != h1
    files = sorted(p for p in (run_dir / "artifacts").rglob("*") if p.is_file())
    assert files == sorted([path, run_dir / "artifacts" / h3[:2] / h3])  # no dupes, no temp files
    assert store.get_artifact(h3) == "other"
    with pytest.raises(StoreError):
        store.get_artifact("ab" + "0" * 62)


def test_same_text_in_problem_and_design_is_stored_once(store, problem, run_dir):
    store.add_problem(problem)
    d = candidate_design(problem.source)
    rec = store.add_design(problem.id, d)
    assert rec.files["candidate.py"] == store.problems()[0].source_hash
    assert len([p for p in (run_dir / "artifacts").rglob("*") if p.is_file()]) == 1


def test_readding_problem_and_design_is_a_no_op(store, problem, run_dir):
    store.add_problem(problem)
    store.add_problem(problem)
    d = candidate_design(SRC, provenance={"role": "first"})
    store.add_design(problem.id, d)
    store.add_design(problem.id, d)
    # same content, other provenance: same id, so nothing new is written (first one kept)
    store.add_design(problem.id, candidate_design(SRC, provenance={"role": "second"}))
    assert raw(run_dir, "SELECT COUNT(*) FROM problems") == [(1,)]
    assert raw(run_dir, "SELECT COUNT(*) FROM designs") == [(1,)]
    assert len(store.designs()) == 1
    assert store.design(d.id).provenance == {"role": "first"}


def test_reopen_sees_data(run_dir, problem):
    with RunStore.open(run_dir) as s:
        s.add_problem(problem)
        d = candidate_design(SRC, parent_ids=("p",))
        s.add_design(problem.id, d)
        eid = s.add_evaluation(evaluation(problem.id, d.id))
    with RunStore.open(run_dir) as s:
        assert [p.id for p in s.problems()] == [problem.id]
        assert s.design(d.id).parent_ids == ["p"]
        assert [e.id for e in s.evaluations(d.id)] == [eid]
        assert s.design_source(d.id) == SRC
        assert s.schema_version == SCHEMA_VERSION


def test_schema_version_recorded(store, run_dir):
    assert store.schema_version == SCHEMA_VERSION
    assert raw(run_dir, "SELECT value FROM meta WHERE key='schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]


def test_a_schema_2_database_gains_the_review_failed_column(run_dir, problem):
    # A run made by the previous release: its reviews table has no `failed` column.
    RunStore.open(run_dir).close()
    conn = sqlite3.connect(run_dir / "run.db")
    conn.execute("DROP TABLE reviews")
    conn.execute("CREATE TABLE reviews (design_id TEXT NOT NULL REFERENCES designs(id), "
                 "cheating INTEGER NOT NULL, reason TEXT NOT NULL, created_at REAL NOT NULL)")
    conn.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with RunStore.open(run_dir) as s:
        assert s.schema_version == SCHEMA_VERSION
        s.add_problem(problem)
        d = candidate_design(SRC)
        s.add_design(problem.id, d)
        s.add_review(ReviewRecord(design_id=d.id, cheating=False, reason="timeout", created_at=1.0, failed=True))
        assert [(r.failed, r.reason) for r in s.reviews()] == [(True, "timeout")]


def test_newer_schema_raises_store_error(run_dir):
    RunStore.open(run_dir).close()
    conn = sqlite3.connect(run_dir / "run.db")
    conn.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="999"):
        RunStore.open(run_dir)


def test_corrupt_database_raises_store_error(run_dir):
    run_dir.mkdir(parents=True)
    (run_dir / "run.db").write_bytes(b"this is not a sqlite database at all\x00\x01" * 200)
    with pytest.raises(StoreError) as ei:
        RunStore.open(run_dir)
    assert str(run_dir) in str(ei.value)


def test_evaluation_for_unknown_design_raises_store_error(store, problem):
    store.add_problem(problem)
    with pytest.raises(StoreError):
        store.add_evaluation(evaluation(problem.id, "no-such-design"))
