"""What a new user meets first: failure reasons and notes in `show`, a dead LLM endpoint
stopping the run at once, option-level messages."""

from __future__ import annotations

import json
import socket
import time

from test_cli_search import PROBLEM, fake_run

from stratagem.cli import main
from stratagem.config import OLLAMA_DEFAULT_URL, AgentsConfig


def test_show_names_the_failing_validator_and_reason_of_every_invalid_design(tmp_path, capsys) -> None:
    fake_run(tmp_path / "r")
    assert main(["show", str(tmp_path / "r"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    bad = [d for d in out["all_designs"] if d["status"] != "valid"]
    assert len(bad) == 1 and bad[0]["failed_at"] == "correctness" and "nan" in bad[0]["reason"].lower()
    assert [d["id"] for d in out["leaderboard"]] and all(d["status"] == "valid" for d in out["leaderboard"])
    assert [it["n"] for it in out["iteration_log"]] == [1, 2] and all("note" in it for it in out["iteration_log"])
    assert main(["show", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    assert "Designs that did not pass (1)" in text and "correctness" in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dead_endpoint_stops_the_run_at_once_with_the_providers_error(tmp_path, capsys, monkeypatch) -> None:
    from pydantic_ai import models

    port = _free_port()  # nothing listens there, so no LLM can answer: the one request the
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", True)  # suite lets out, to a dead port
    t0 = time.monotonic()
    code = main(["run", str(PROBLEM), "--model", "qwen3", "--endpoint", f"http://127.0.0.1:{port}/v1",
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr()
    assert code == 1
    assert time.monotonic() - t0 < 30
    text = err.out + err.err
    assert "cannot be reached" in text and "Connection" in text and f"127.0.0.1:{port}" in text
    assert not (tmp_path / "run").exists()  # no run directory for a run that never started


def test_an_endpoint_without_a_model_is_an_error_naming_both_options(tmp_path, capsys) -> None:
    code = main(["run", str(PROBLEM), "--endpoint", "http://127.0.0.1:1/v1", "--run-dir", str(tmp_path / "r")])
    text = capsys.readouterr().out
    assert code == 2 and "--endpoint" in text and "--model" in text


def test_a_bad_device_names_the_option(capsys) -> None:
    code = main(["eval", str(PROBLEM), str(PROBLEM), "--device", "tpu"])
    text = " ".join(capsys.readouterr().out.split())
    assert code == 2 and "--device" in text and "'tpu'" in text and "ValidationError" not in text


def test_a_missing_api_key_gets_the_clis_advice_not_the_librarys(capsys, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = main(["run", str(PROBLEM), "--model", "openai:gpt-4.1"])
    text = " ".join(capsys.readouterr().out.split())
    assert code == 2 and "OPENAI_API_KEY" in text and "--model test" in text and "Agent('test')" not in text


def test_ollama_models_default_to_the_local_server(monkeypatch) -> None:
    monkeypatch.delenv("OLLAMA_BASE_URL", raising=False)
    assert AgentsConfig(model="ollama:qwen3:32b").resolved_endpoints() == [OLLAMA_DEFAULT_URL]
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://gpu-box:11434/v1")
    assert AgentsConfig(model="ollama:qwen3:32b").resolved_endpoints() == ["http://gpu-box:11434/v1"]
    assert AgentsConfig(model="ollama:x", endpoints=["http://a/v1"]).resolved_endpoints() == ["http://a/v1"]
    assert AgentsConfig(model="openai:gpt-4.1").resolved_endpoints() == []


def test_the_help_shows_no_raw_type_placeholders(capsys) -> None:
    for cmd in (["run", "--help"], ["eval", "--help"], ["show", "--help"]):
        main(cmd)
        text = capsys.readouterr().out
        assert "<bool>" not in text and "<list[str]>" not in text, cmd
        assert "{problem}" not in text and "{run_dir}" not in text, cmd
