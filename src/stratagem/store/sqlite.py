"""Owns the SQLite run database (WAL) in a run directory, and its artifact directory; opening
it to read only (`RunStore.read`), which writes nothing into the run directory.

Layout: `<run_dir>/run.db`, `<run_dir>/artifacts/<hash[:2]>/<hash>` (sources, logs) by
sha256 of their content, and `<run_dir>/run.lock`, the lease of the process running the search
(`store/liveness.py`). Inserts are append-only; re-adding a problem or design with the same
id is a no-op, so a resumed run never duplicates them. The only module with SQL, with the
search's tables it mixes into `RunStore` (`store/search_tables.py`), which run theirs on its
connection.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stratagem.core.design import Design
from stratagem.core.problem import Problem, content_hash
from stratagem.errors import StoreError
from stratagem.store.liveness import RunLease
from stratagem.store.records import (
    SCHEMA_VERSION,
    DesignRecord,
    EvaluationRecord,
    MeasurementRecord,
    ProblemRecord,
)
from stratagem.store.search_tables import SearchTables, insert

_AGENT_CALLS = """
CREATE TABLE IF NOT EXISTS agent_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, iteration INTEGER, role TEXT NOT NULL,
    model TEXT NOT NULL, prompt_hash TEXT NOT NULL, input_tokens INTEGER,
    output_tokens INTEGER, requests INTEGER NOT NULL, cost_usd REAL,
    latency_s REAL NOT NULL, retries INTEGER NOT NULL, ok INTEGER NOT NULL, error TEXT,
    messages_hash TEXT NOT NULL, created_at REAL NOT NULL);
"""
"""Agent calls; a NULL token count is unknown (the agent reported none). Schemas before 7
declared both NOT NULL (`_nullable_tokens` rebuilds such a table, keeping its rows)."""

_SCHEMA = _AGENT_CALLS + """
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
    reference_ms TEXT NOT NULL, created_at REAL NOT NULL,
    speedups TEXT NOT NULL DEFAULT '{}', stability TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS measurements (
    evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
    name TEXT NOT NULL, unit TEXT NOT NULL,
    median REAL NOT NULL, q1 REAL NOT NULL, q3 REAL NOT NULL, samples TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS run (
    id INTEGER PRIMARY KEY CHECK (id = 1), problem_id TEXT NOT NULL, policy TEXT NOT NULL,
    config TEXT NOT NULL, status TEXT NOT NULL, stop_reason TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS iterations (
    n INTEGER PRIMARY KEY, status TEXT NOT NULL, context_ids TEXT NOT NULL, plan TEXT,
    design_ids TEXT NOT NULL, note TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL);
CREATE TABLE IF NOT EXISTS reviews (
    design_id TEXT NOT NULL REFERENCES designs(id), cheating INTEGER NOT NULL,
    reason TEXT NOT NULL, created_at REAL NOT NULL, failed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS design_tags (
    design_id TEXT NOT NULL REFERENCES designs(id), key TEXT NOT NULL, value TEXT NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY (design_id, key));
CREATE TABLE IF NOT EXISTS policy_state (
    key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS confirmations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created_at REAL NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS evaluations_design ON evaluations(design_id);
CREATE INDEX IF NOT EXISTS designs_problem ON designs(problem_id);
"""


class RunStore(SearchTables):
    """A run directory's database and artifacts; the search's tables are `SearchTables`'."""

    DB_NAME = "run.db"
    _conn: sqlite3.Connection

    def __init__(self, run_dir: Path, conn: sqlite3.Connection, read_only: bool = False,
                 scratch: Path | None = None) -> None:
        self.run_dir = run_dir
        self._conn = conn
        self.read_only = read_only
        """Opened by `read`: every write raises StoreError and nothing is written in `run_dir`."""
        self._scratch = scratch
        """A private copy of the database a read works on (removed on close), when it needs one."""
        self._lease: RunLease | None = None
        """Held while this store has the run marked `running` (`store/liveness.py`)."""

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
            elif int(row[0]) < SCHEMA_VERSION:  # older databases gain the new tables above
                _upgrade(conn)
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

    @classmethod
    def read(cls, run_dir: str | Path) -> RunStore:
        """Open an existing run database to read it, writing nothing into `run_dir` (no
        `-wal` or `-shm` file left behind, no schema change): `show`, `compare`, `report` and
        the live page use this. A run in progress (or killed) has its `-wal` and `-shm`: the
        database is opened read-only (`mode=ro`) and reads what the run has committed, through
        its WAL. A finished run has neither: it is opened `immutable` (no locks, no files).
        A WAL without its index, or a database of an older schema, is read from a private
        copy in a temporary directory, migrated there.

        Raises:
            StoreError: no run database in `run_dir`, or it is unreadable or from a newer schema.
        """
        d = Path(run_dir)
        db = d / cls.DB_NAME
        if not db.is_file():
            raise StoreError(f"{d} holds no run database ({cls.DB_NAME})")
        wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
        scratch: Path | None = None
        conn: sqlite3.Connection | None = None
        try:
            if wal.exists() and shm.exists():
                conn = _connect_uri(db, "mode=ro")
            elif wal.exists() and wal.stat().st_size > 0:  # committed pages only in the WAL
                scratch = Path(tempfile.mkdtemp(prefix="stratagem-read-"))
                shutil.copyfile(db, scratch / cls.DB_NAME)
                shutil.copyfile(wal, scratch / f"{cls.DB_NAME}-wal")
                conn = _connect_uri(scratch / cls.DB_NAME, "mode=ro")
            else:
                conn = _connect_uri(db, "immutable=1")
            conn.execute("PRAGMA query_only=ON")
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row is not None else 0
            if version > SCHEMA_VERSION:
                raise StoreError(f"{db} has schema {version}; this stratagem reads up to {SCHEMA_VERSION}")
            if version < SCHEMA_VERSION:  # an older run: migrate a private copy, not the run
                scratch = scratch or Path(tempfile.mkdtemp(prefix="stratagem-read-"))
                copy = sqlite3.connect(scratch / "migrated.db", isolation_level=None)
                conn.backup(copy)
                conn.close()
                conn = copy
                conn.executescript(_SCHEMA)
                _upgrade(conn)
                conn.execute("PRAGMA query_only=ON")
        except (sqlite3.DatabaseError, StoreError, OSError) as e:
            if conn is not None:
                conn.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            if isinstance(e, StoreError):
                raise
            raise StoreError(f"cannot read the run database in {d}: {e}") from e
        return cls(d, conn, read_only=True, scratch=scratch)

    def close(self) -> None:
        self._release()
        self._conn.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise StoreError(f"{self.run_dir} was opened to read it: nothing is written")
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
        if self.read_only:
            raise StoreError(f"{self.run_dir} was opened to read it: nothing is written")
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

    def add_design(self, problem_id: str, design: Design, tags: Mapping[str, Any] | None = None) -> DesignRecord:
        """Store a design, and its first `tags` in the same transaction (a killed run never
        leaves a design without the tags its policy finds it by).

        Raises:
            StoreError: a tag value that is not JSON.
        """
        try:
            tag_rows = [(design.id, str(k), json.dumps(v), time.time()) for k, v in (tags or {}).items()]
        except (TypeError, ValueError) as e:
            raise StoreError(f"tags of design {design.id[:12]} must be JSON values: {e}") from e
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
            c.executemany("INSERT INTO design_tags VALUES (?,?,?,?) ON CONFLICT(design_id, key) "
                          "DO UPDATE SET value=excluded.value, updated_at=excluded.updated_at", tag_rows)
        return rec

    def add_evaluation(self, rec: EvaluationRecord) -> int:
        with self._tx() as c:
            eid = insert(c, "evaluations", rec.model_dump(exclude={"id", "measurements"}))
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

    def design_source(self, design_id: str, name: str | None = None) -> str:
        """The text of the design's file `name` (None: its one file)."""
        rec = self.design(design_id)
        if rec is None:
            raise StoreError(f"no design {design_id}")
        if name is None and len(rec.files) == 1:
            name = next(iter(rec.files))
        if name is None or name not in rec.files:
            raise StoreError(f"no file {name or '(one of ' + ', '.join(rec.files) + ')'} for design {design_id}")
        return self.get_artifact(rec.files[name])

    def evaluations(self, design_id: str | None = None) -> list[EvaluationRecord]:
        q = ("SELECT id, design_id, problem_id, status, device, runtime_ms, speedup, validators,"
             " environment, seeds, reference_ms, created_at, speedups, stability FROM evaluations")
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
                speedups=json.loads(r[12]), stability=json.loads(r[13]),
                measurements=[MeasurementRecord(name=m[0], unit=m[1], median=m[2], q1=m[3], q3=m[4],
                                                samples=json.loads(m[5])) for m in ms],
            ))
        return out


ADDED_COLUMNS = (
    ("reviews", "failed", "INTEGER NOT NULL DEFAULT 0"),
    ("evaluations", "speedups", "TEXT NOT NULL DEFAULT '{}'"),
    ("evaluations", "stability", "TEXT NOT NULL DEFAULT '{}'"),
)
"""Columns later schemas added to tables an older database already has: (table, column, type)."""


def _connect_uri(db: Path, params: str) -> sqlite3.Connection:
    """A connection to `db` opened by URI with `params` (`mode=ro`, `immutable=1`)."""
    return sqlite3.connect(f"{db.resolve().as_uri()}?{params}", uri=True, timeout=30, isolation_level=None)


def _upgrade(conn: sqlite3.Connection) -> None:
    """Bring an older database to `SCHEMA_VERSION` in one transaction (another process opening
    the same run at once finds it done, or waits): the columns later schemas added, the token
    columns made nullable (their rows kept: an old run's 0s stay 0s), then the version."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None or int(row[0]) < SCHEMA_VERSION:
            _add_missing_columns(conn)
            _nullable_tokens(conn)
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT(key) DO UPDATE SET "
                         "value=excluded.value", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    for table, column, decl in ADDED_COLUMNS:
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if column not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")


def _nullable_tokens(conn: sqlite3.Connection) -> None:
    """Schema 7: rebuild an `agent_calls` table whose token columns are NOT NULL (SQLite cannot
    alter a column's constraint), copying every row as it is."""
    not_null = {r[1]: bool(r[3]) for r in conn.execute("PRAGMA table_info(agent_calls)")}
    if not (not_null.get("input_tokens") or not_null.get("output_tokens")):
        return
    cols = ", ".join(not_null)
    conn.execute("ALTER TABLE agent_calls RENAME TO agent_calls_before_7")
    conn.execute(_AGENT_CALLS)
    conn.execute(f"INSERT INTO agent_calls ({cols}) SELECT {cols} FROM agent_calls_before_7")
    conn.execute("DROP TABLE agent_calls_before_7")


def _design(r: tuple[object, ...]) -> DesignRecord:
    return DesignRecord(
        id=str(r[0]), problem_id=str(r[1]), files=json.loads(str(r[2])),
        parent_ids=json.loads(str(r[3])), provenance=json.loads(str(r[4])), created_at=float(r[5]),  # type: ignore[arg-type]
    )
