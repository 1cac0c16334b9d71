"""Usage an agent does not report is unknown, never 0 (issue 30): NULL tokens in the run
database, `show` saying so, a `--max-tokens` budget that stops the run at such a call (it
cannot be kept), and run databases of schema 6 (NOT NULL token columns, 0s) opening and
resuming as they were."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from stratagem.cli import main
from stratagem.config import SearchConfig
from stratagem.search.budget import Budgets, Spend
from stratagem.store.records import SCHEMA_VERSION, AgentCallRecord
from stratagem.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests/adversarial/problems/linear_relu.py"
HONEST = ROOT / "tests/adversarial/honest/addmm_fused.py"
FAST = ('[pytorch]\nbaselines = ["eager"]\ncorrectness_trials = 2\n'
        "[pytorch.timing]\nwarmup_ms = 5\nbudget_ms = 20\nmin_reps = 3\nmax_reps = 30\n"
        "[search]\nconfirm_top = 0\n")

OLD_AGENT_CALLS = """CREATE TABLE agent_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, iteration INTEGER, role TEXT NOT NULL,
    model TEXT NOT NULL, prompt_hash TEXT NOT NULL, input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, requests INTEGER NOT NULL, cost_usd REAL,
    latency_s REAL NOT NULL, retries INTEGER NOT NULL, ok INTEGER NOT NULL, error TEXT,
    messages_hash TEXT NOT NULL, created_at REAL NOT NULL)"""
"""The table as schema 6 declared it (token columns NOT NULL)."""


def _call(inp: int | None, out: int | None, **kw: object) -> AgentCallRecord:
    return AgentCallRecord(iteration=1, role="mutate", model="command:sh", prompt_hash="p", input_tokens=inp,
                           output_tokens=out, requests=1, cost_usd=None, latency_s=1.0, retries=0, ok=True,
                           error=None, messages_hash="m", created_at=time.time(), **kw)  # type: ignore[arg-type]


def _to_schema_6(db: Path) -> None:
    """Rewrite a run database as stratagem wrote it at schema 6: NOT NULL token columns,
    holding 0 where the agent reported nothing."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("BEGIN")
        con.execute("ALTER TABLE agent_calls RENAME TO newer")
        con.execute(OLD_AGENT_CALLS)
        con.execute("INSERT INTO agent_calls SELECT id, iteration, role, model, prompt_hash, IFNULL(input_tokens, 0),"
                    " IFNULL(output_tokens, 0), requests, cost_usd, latency_s, retries, ok, error, messages_hash,"
                    " created_at FROM newer")
        con.execute("DROP TABLE newer")
        con.execute("UPDATE meta SET value='6' WHERE key='schema_version'")
        con.execute("COMMIT")
    finally:
        con.close()


def _not_null(db: Path) -> dict[str, bool]:
    con = sqlite3.connect(db)
    try:
        return {r[1]: bool(r[3]) for r in con.execute("PRAGMA table_info(agent_calls)")}
    finally:
        con.close()


def test_spend_and_budget_with_unreported_calls() -> None:
    s = Spend()
    s.add_call(_call(100, 20))
    assert s.tokens_text() == "tokens 120"
    s.add_call(_call(None, None))
    s.add_call(_call(5, None))  # only the input reported: the call's tokens are not known
    assert (s.tokens, s.unreported_calls, s.calls) == (125, 2, 3)
    assert s.tokens_text() == "tokens 125 (2 of 3 agent calls unreported)"
    assert s.to_json()["tokens"] == 125 and s.to_json()["unreported_calls"] == 2

    only = Spend()
    only.add_call(_call(None, None))
    assert only.tokens_text() == "tokens unknown (1 of 1 agent calls unreported)"
    assert only.to_json()["tokens"] is None and only.to_json()["input_tokens"] is None

    # a token budget cannot be kept over an unknown call: used up, with the reason and the way out
    b = Budgets(SearchConfig(max_tokens=1_000_000), only)
    reason = b.exhausted()
    assert reason is not None and reason.startswith("max_tokens") and "reported no token usage" in reason
    assert "--max-queries" in reason and b.remaining().tokens == 0
    # without one the run goes on, the unknown calls counted
    assert Budgets(SearchConfig(max_queries=10), only).exhausted() is None
    # reported 0s (a schema-6 database's) are known and count as 0
    zeros = Spend.from_records([_call(0, 0)], [])
    assert zeros.unreported_calls == 0 and Budgets(SearchConfig(max_tokens=10), zeros).exhausted() is None


def test_a_schema_6_database_opens_keeps_its_zeros_and_takes_unknowns(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RunStore.open(run) as s:
        s.add_agent_call(_call(0, 0))
        s.add_agent_call(_call(7, 3))
    _to_schema_6(run / RunStore.DB_NAME)
    assert _not_null(run / RunStore.DB_NAME)["input_tokens"]

    with RunStore.read(run) as r:  # read: migrated in a private copy, the run untouched
        assert [(c.input_tokens, c.output_tokens) for c in r.agent_calls()] == [(0, 0), (7, 3)]
    assert _not_null(run / RunStore.DB_NAME)["input_tokens"]

    with RunStore.open(run) as s:
        assert s.schema_version == SCHEMA_VERSION == 7
        assert [(c.id, c.input_tokens, c.output_tokens) for c in s.agent_calls()] == [(1, 0, 0), (2, 7, 3)]
        assert s.add_agent_call(_call(None, None)) == 3  # ids go on after the copied rows
        assert [(c.input_tokens, c.output_tokens) for c in s.agent_calls()][-1] == (None, None)
    assert not any(_not_null(run / RunStore.DB_NAME)[k] for k in ("input_tokens", "output_tokens"))
    with RunStore.open(run) as s:  # opened again: nothing to do
        assert len(s.agent_calls()) == 3


def _out(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_an_agent_that_reports_nothing_under_a_token_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through a real PIKE-O run on the CPU: the agent writes an honest candidate and reports
    no usage. Its tokens are NULL, `show` says they are unknown, and `--max-tokens` stops the
    run at once (it cannot be kept). The same database rewritten as schema 6 wrote it (0s)
    opens and resumes, its 0s counted as reported."""
    agent = tmp_path / "agent.sh"
    agent.write_text(f"#!/bin/sh\ncp {HONEST} candidate.py\necho 'done, no usage line'\n", encoding="utf-8")
    cfg = tmp_path / "fast.toml"
    cfg.write_text(FAST, encoding="utf-8")
    run = tmp_path / "run"
    code = main(["run", str(PROBLEM), "--policy", "pike-o", "--agent-cmd", f"sh {agent}", "--max-queries", "6",
                 "--max-tokens", "100000", "--device", "cpu", "--run-dir", str(run), "--config", str(cfg), "--json"])
    out = _out(capsys)
    assert code in (0, 3), out
    assert out["stop_reason"].startswith("max_tokens") and "reported no token usage" in out["stop_reason"], out
    con = sqlite3.connect(run / RunStore.DB_NAME)
    try:
        rows = con.execute("SELECT input_tokens, output_tokens, cost_usd FROM agent_calls").fetchall()
    finally:
        con.close()
    assert rows and all(r == (None, None, None) for r in rows), rows
    assert len(rows) < 6  # stopped at the first batch, not at the query limit
    assert out["spend"]["tokens"] is None and out["spend"]["unreported_calls"] == len(rows)

    assert main(["show", str(run)]) == 0
    text = capsys.readouterr().out
    assert f"tokens unknown ({len(rows)} of {len(rows)} agent calls unreported)" in " ".join(text.split()), text
    assert main(["show", str(run), "--json"]) == 0
    assert _out(capsys)["spend"]["tokens"] is None

    # as stratagem wrote it before schema 7 (0s), with its query budget used: it resumes,
    # its 0s counted as reported (no max_tokens stop), and stops at once on max_queries
    _to_schema_6(run / RunStore.DB_NAME)
    con = sqlite3.connect(run / RunStore.DB_NAME)
    try:
        body = json.loads(con.execute("SELECT config FROM run").fetchone()[0])
        body["search"]["max_queries"] = len(rows)
        con.execute("UPDATE run SET config=?", (json.dumps(body),))
        con.commit()
    finally:
        con.close()
    assert main(["resume", str(run), "--json"]) in (0, 3)
    again = _out(capsys)
    assert again["stop_reason"].startswith("max_queries"), again
    assert again["spend"]["tokens"] == 0 and again["spend"]["unreported_calls"] == 0
    with RunStore.read(run) as r:
        assert r.schema_version == SCHEMA_VERSION and len(r.agent_calls()) == len(rows)
