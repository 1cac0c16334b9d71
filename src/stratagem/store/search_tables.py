"""Owns the search's tables of the run database, as a part of `RunStore` (store/sqlite.py,
which opens the database and mixes these in): the run and its status (with the run's lease,
`store/liveness.py`), iterations, agent calls, reviews, design tags, policy state and
confirmation rounds. It runs its SQL on the store's connection and never imports sqlite3.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from stratagem.errors import StoreError
from stratagem.store.liveness import RunLease, observed
from stratagem.store.records import (
    AgentCallRecord,
    DesignRecord,
    IterationRecord,
    ReviewRecord,
    RunRecord,
)


class Rows(Protocol):
    """What the tables use of a cursor (a `sqlite3.Cursor`)."""

    @property
    def lastrowid(self) -> int | None: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the tables use of the store's connection (a `sqlite3.Connection`)."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Rows: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Rows: ...


def insert(c: Connection, table: str, row: Mapping[str, Any]) -> int:
    """Insert `row` into `table`, its keys naming the columns (a list or dict value is stored as
    JSON); the new row's id."""
    values = [json.dumps(v) if isinstance(v, list | dict) else v for v in row.values()]
    cur = c.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({','.join('?' * len(row))})", values)
    return int(cur.lastrowid or 0)


class SearchTables:
    """The search's tables, mixed into `RunStore`, which provides the connection, the
    transactions and the designs."""

    run_dir: Path
    read_only: bool
    _conn: Connection
    _lease: RunLease | None

    def _tx(self) -> AbstractContextManager[Connection]:
        """A write transaction (`RunStore._tx`)."""
        raise NotImplementedError

    def design(self, design_id: str) -> DesignRecord | None:
        """A stored design (`RunStore.design`)."""
        raise NotImplementedError

    def start_run(self, problem_id: str, policy: str, config: dict[str, object]) -> RunRecord:
        """Record this directory's run; an existing run is kept (resume) and returned.

        Raises:
            StoreError: the directory already holds a run of another problem.
        """
        now = time.time()
        self._hold()  # before the database says running: readers never see it unheld
        with self._tx() as c:
            c.execute("INSERT OR IGNORE INTO run VALUES (1,?,?,?,?,?,?,?)",
                      (problem_id, policy, json.dumps(config), "running", None, now, now))
        run = self.run()
        assert run is not None
        if run.problem_id != problem_id:
            raise StoreError(f"{self.run_dir} holds a run of another problem ({run.problem_id[:12]})")
        return run

    def run(self) -> RunRecord | None:
        """The directory's run, its status as it really is: one marked `running` that no
        process runs (killed outright) is `interrupted` (`liveness.observed`)."""
        r = self._conn.execute("SELECT problem_id, policy, config, status, stop_reason, created_at,"
                               " updated_at FROM run WHERE id=1").fetchone()
        if r is None:
            return None
        return observed(RunRecord(problem_id=r[0], policy=r[1], config=json.loads(r[2]), status=r[3],
                                  stop_reason=r[4], created_at=r[5], updated_at=r[6]), self.run_dir)

    def set_run_status(self, status: str, stop_reason: str | None = None) -> None:
        """Mark the run; `running` holds the run's lease (`store/liveness.py`) until it is marked
        otherwise or the store closes, so readers can tell a live run from a killed one."""
        if status == "running":
            self._hold()
        with self._tx() as c:
            c.execute("UPDATE run SET status=?, stop_reason=?, updated_at=? WHERE id=1",
                      (status, stop_reason, time.time()))
        if status != "running":
            self._release()

    def _hold(self) -> None:
        if self._lease is None and not self.read_only:
            self._lease = RunLease.take(self.run_dir)

    def _release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def start_iteration(self, n: int, context_ids: dict[str, list[str]]) -> None:
        """Open iteration `n` (re-opening one a killed run left `running` keeps its start)."""
        with self._tx() as c:
            c.execute("INSERT OR IGNORE INTO iterations VALUES (?,?,?,?,?,?,?,?)",
                      (n, "running", json.dumps(context_ids), None, "[]", "", time.time(), None))

    def finish_iteration(
        self, n: int, status: str, plan: dict[str, object] | None, design_ids: list[str], note: str,
        context_ids: dict[str, list[str]] | None = None,
    ) -> None:
        """Close iteration `n`; `context_ids` (the curated design ids per group) when known."""
        with self._tx() as c:
            c.execute("UPDATE iterations SET status=?, plan=?, design_ids=?, note=?, finished_at=?"
                      " WHERE n=?", (status, None if plan is None else json.dumps(plan),
                                     json.dumps(design_ids), note, time.time(), n))
            if context_ids is not None:
                c.execute("UPDATE iterations SET context_ids=? WHERE n=?", (json.dumps(context_ids), n))

    def iterations(self) -> list[IterationRecord]:
        rows = self._conn.execute("SELECT n, status, context_ids, plan, design_ids, note, started_at,"
                                  " finished_at FROM iterations ORDER BY n").fetchall()
        return [IterationRecord(n=r[0], status=r[1], context_ids=json.loads(r[2]),
                                plan=None if r[3] is None else json.loads(r[3]),
                                design_ids=json.loads(r[4]), note=r[5], started_at=r[6],
                                finished_at=r[7]) for r in rows]

    def add_agent_call(self, rec: AgentCallRecord) -> int:
        with self._tx() as c:
            return insert(c, "agent_calls", rec.model_dump(exclude={"id"}))

    def agent_calls(self) -> list[AgentCallRecord]:
        rows = self._conn.execute(
            "SELECT id, iteration, role, model, prompt_hash, input_tokens, output_tokens, requests,"
            " cost_usd, latency_s, retries, ok, error, messages_hash, created_at FROM agent_calls"
            " ORDER BY id").fetchall()
        return [AgentCallRecord(id=r[0], iteration=r[1], role=r[2], model=r[3], prompt_hash=r[4],
                                input_tokens=r[5], output_tokens=r[6], requests=r[7], cost_usd=r[8],
                                latency_s=r[9], retries=r[10], ok=bool(r[11]), error=r[12],
                                messages_hash=r[13], created_at=r[14]) for r in rows]

    def add_review(self, rec: ReviewRecord) -> None:
        with self._tx() as c:
            insert(c, "reviews", rec.model_dump())

    def reviews(self) -> list[ReviewRecord]:
        rows = self._conn.execute("SELECT design_id, cheating, reason, created_at, failed FROM reviews"
                                  " ORDER BY rowid").fetchall()
        return [ReviewRecord(design_id=r[0], cheating=bool(r[1]), reason=r[2], created_at=r[3],
                             failed=bool(r[4])) for r in rows]


    def set_tags(self, design_id: str, tags: Mapping[str, Any]) -> None:
        """Set a policy's tags on a stored design (JSON values; a key set again is replaced).

        Raises:
            StoreError: no such design, or a value that is not JSON.
        """
        if self.design(design_id) is None:
            raise StoreError(f"cannot tag design {design_id[:12]}: it is not stored in this run")
        try:
            rows = [(design_id, str(k), json.dumps(v), time.time()) for k, v in tags.items()]
        except (TypeError, ValueError) as e:
            raise StoreError(f"tags of design {design_id[:12]} must be JSON values: {e}") from e
        with self._tx() as c:
            c.executemany("INSERT INTO design_tags VALUES (?,?,?,?) ON CONFLICT(design_id, key) "
                          "DO UPDATE SET value=excluded.value, updated_at=excluded.updated_at", rows)

    def tags(self, design_id: str | None = None) -> dict[str, dict[str, Any]]:
        """design id -> its tags (every tagged design, or one)."""
        q, args = "SELECT design_id, key, value FROM design_tags", ()
        if design_id is not None:
            q, args = q + " WHERE design_id=?", (design_id,)
        out: dict[str, dict[str, Any]] = {}
        for d, k, v in self._conn.execute(q + " ORDER BY rowid", args):
            out.setdefault(d, {})[k] = json.loads(v)
        return out

    def set_policy_state(self, key: str, value: Any) -> None:
        """Keep a policy's own state under `key` (a JSON value; set again, it is replaced), so a
        killed run's policy resumes where it was (PIKE's phase plans, PIKE-O's islands).

        Raises:
            StoreError: a value that is not JSON.
        """
        try:
            text = json.dumps(value)
        except (TypeError, ValueError) as e:
            raise StoreError(f"policy state {key!r} must be a JSON value: {e}") from e
        with self._tx() as c:
            c.execute("INSERT INTO policy_state VALUES (?,?,?) ON CONFLICT(key) DO UPDATE SET "
                      "value=excluded.value, updated_at=excluded.updated_at", (key, text, time.time()))

    def policy_state(self, key: str) -> Any:
        """The value kept under `key`, or None."""
        row = self._conn.execute("SELECT value FROM policy_state WHERE key=?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])


    def add_confirmation(self, body: Mapping[str, Any]) -> int:
        """Keep a confirmation round (`search/confirm.py`: its blocks, designs and ratios)."""
        with self._tx() as c:
            cur = c.execute("INSERT INTO confirmations (created_at, body) VALUES (?,?)",
                            (time.time(), json.dumps(dict(body))))
            return int(cur.lastrowid or 0)

    def confirmations(self) -> list[dict[str, Any]]:
        """Every confirmation round kept, oldest first (each with its `created_at`)."""
        rows = self._conn.execute("SELECT created_at, body FROM confirmations ORDER BY id").fetchall()
        return [{**json.loads(body), "created_at": float(at)} for at, body in rows]
