"""Owns the SQLite run database (WAL) in a run directory, and its artifact directory.

Layout: `<run_dir>/run.db` and `<run_dir>/artifacts/<hash[:2]>/<hash>` (sources, logs) by
sha256 of their content. Inserts are append-only; re-adding a problem or design with the same
id is a no-op, so a resumed run never duplicates them. The only module with SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stratagem.core.design import Design
from stratagem.core.problem import Problem, content_hash
from stratagem.errors import StoreError
from stratagem.store.records import (
    SCHEMA_VERSION,
    DesignRecord,
    EvaluationRecord,
    MeasurementRecord,
    ProblemRecord,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS problems (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, domain TEXT NOT NULL, path TEXT,
    source_hash TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS designs (
    id TEXT PRIMARY KEY, problem_id TEXT NOT NULL REFERENCES problems(id),
    files TEXT NOT NULL, parent_ids TEXT NOT NULL, provenance TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    design_id TEXT NOT NULL REFERENCES designs(id),
    problem_id TEXT NOT NULL REFERENCES problems(id),
    status TEXT NOT NULL, device TEXT NOT NULL,
    runtime_ms REAL, speedup REAL,
    validators TEXT NOT NULL, environment TEXT NOT NULL, seeds TEXT NOT NULL,
    reference_ms TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (
    evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
    name TEXT NOT NULL, unit TEXT NOT NULL,
    median REAL NOT NULL, q1 REAL NOT NULL, q3 REAL NOT NULL, samples TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS evaluations_design ON evaluations(design_id);
CREATE INDEX IF NOT EXISTS designs_problem ON designs(problem_id);
"""


class RunStore:
    """A run directory's database and artifacts."""

    DB_NAME = "run.db"

    def __init__(self, run_dir: Path, conn: sqlite3.Connection) -> None:
        self.run_dir = run_dir
        self._conn = conn

    @classmethod
    def open(cls, run_dir: str | Path) -> RunStore:
        """Open (creating if needed) the run database in `run_dir`.

        Raises:
            StoreError: the database is unreadable or from a newer schema.
        """
        d = Path(run_dir)
        d.mkdir(parents=True, exist_ok=True)
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(d / cls.DB_NAME, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreError(
                    f"{d / cls.DB_NAME} has schema {row[0]}; this stratagem reads up to {SCHEMA_VERSION}"
                )
        except (sqlite3.DatabaseError, StoreError) as e:
            if conn is not None:
                conn.close()
            if isinstance(e, StoreError):
                raise
            raise StoreError(f"cannot open run database in {d}: {e}") from e
        return cls(d, conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"run database {self.run_dir / self.DB_NAME}: {e}") from e

    @property
    def schema_version(self) -> int:
        return int(self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])

    # -- artifacts ------------------------------------------------------------------------

    def put_artifact(self, text: str) -> str:
        h = content_hash(text)
        path = self.run_dir / "artifacts" / h[:2] / h
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        return h

    def get_artifact(self, h: str) -> str:
        try:
            return (self.run_dir / "artifacts" / h[:2] / h).read_text(encoding="utf-8")
        except OSError as e:
            raise StoreError(f"artifact {h} is missing from {self.run_dir}") from e

    # -- writes ---------------------------------------------------------------------------

    def add_problem(self, problem: Problem) -> ProblemRecord:
        rec = ProblemRecord(
            id=problem.id, name=problem.name, domain=problem.domain, path=problem.path,
            source_hash=self.put_artifact(problem.source),
        )
        with self._tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO problems VALUES (?,?,?,?,?,?)",
                (rec.id, rec.name, rec.domain, rec.path, rec.source_hash, time.time()),
            )
        return rec

    def add_design(self, problem_id: str, design: Design) -> DesignRecord:
        rec = DesignRecord(
            id=design.id, problem_id=problem_id,
            files={name: self.put_artifact(text) for name, text in design.files.items()},
            parent_ids=list(design.parent_ids), provenance=dict(design.provenance),
            created_at=time.time(),
        )
        with self._tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO designs VALUES (?,?,?,?,?,?)",
                (rec.id, rec.problem_id, json.dumps(rec.files), json.dumps(rec.parent_ids),
                 json.dumps(rec.provenance), rec.created_at),
            )
        return rec

    def add_evaluation(self, rec: EvaluationRecord) -> int:
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO evaluations (design_id, problem_id, status, device, runtime_ms, speedup,"
                " validators, environment, seeds, reference_ms, created_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (rec.design_id, rec.problem_id, rec.status, rec.device, rec.runtime_ms, rec.speedup,
                 json.dumps(rec.validators), json.dumps(rec.environment), json.dumps(rec.seeds),
                 json.dumps(rec.reference_ms), rec.created_at),
            )
            eid = int(cur.lastrowid or 0)
            c.executemany(
                "INSERT INTO measurements VALUES (?,?,?,?,?,?,?)",
                [(eid, m.name, m.unit, m.median, m.q1, m.q3, json.dumps(m.samples)) for m in rec.measurements],
            )
        return eid

    # -- reads ----------------------------------------------------------------------------

    def problems(self) -> list[ProblemRecord]:
        rows = self._conn.execute("SELECT id, name, domain, path, source_hash FROM problems ORDER BY created_at")
        return [ProblemRecord(id=r[0], name=r[1], domain=r[2], path=r[3], source_hash=r[4]) for r in rows]

    def design(self, design_id: str) -> DesignRecord | None:
        r = self._conn.execute(
            "SELECT id, problem_id, files, parent_ids, provenance, created_at FROM designs WHERE id=?",
            (design_id,),
        ).fetchone()
        return None if r is None else _design(r)

    def designs(self, problem_id: str | None = None) -> list[DesignRecord]:
        q = "SELECT id, problem_id, files, parent_ids, provenance, created_at FROM designs"
        args: tuple[str, ...] = ()
        if problem_id is not None:
            q += " WHERE problem_id=?"
            args = (problem_id,)
        return [_design(r) for r in self._conn.execute(q + " ORDER BY created_at, rowid", args)]

    def design_source(self, design_id: str, name: str = "candidate.py") -> str:
        rec = self.design(design_id)
        if rec is None or name not in rec.files:
            raise StoreError(f"no file {name} for design {design_id}")
        return self.get_artifact(rec.files[name])

    def evaluations(self, design_id: str | None = None) -> list[EvaluationRecord]:
        q = ("SELECT id, design_id, problem_id, status, device, runtime_ms, speedup, validators,"
             " environment, seeds, reference_ms, created_at FROM evaluations")
        args: tuple[str, ...] = ()
        if design_id is not None:
            q += " WHERE design_id=?"
            args = (design_id,)
        out = []
        for r in self._conn.execute(q + " ORDER BY id", args).fetchall():
            ms = self._conn.execute(
                "SELECT name, unit, median, q1, q3, samples FROM measurements WHERE evaluation_id=?", (r[0],)
            ).fetchall()
            out.append(EvaluationRecord(
                id=r[0], design_id=r[1], problem_id=r[2], status=r[3], device=r[4], runtime_ms=r[5],
                speedup=r[6], validators=json.loads(r[7]), environment=json.loads(r[8]),
                seeds=json.loads(r[9]), reference_ms=json.loads(r[10]), created_at=r[11],
                measurements=[MeasurementRecord(name=m[0], unit=m[1], median=m[2], q1=m[3], q3=m[4],
                                                samples=json.loads(m[5])) for m in ms],
            ))
        return out


def _design(r: tuple[object, ...]) -> DesignRecord:
    return DesignRecord(
        id=str(r[0]), problem_id=str(r[1]), files=json.loads(str(r[2])),
        parent_ids=json.loads(str(r[3])), provenance=json.loads(str(r[4])), created_at=float(r[5]),  # type: ignore[arg-type]
    )
