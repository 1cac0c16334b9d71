"""Text that views shorten is cut at word boundaries (`core/text.clip`), and `show --json`
keeps the whole reason (issue 24, item 7: `show` cut reasons mid-word)."""

from __future__ import annotations

import asyncio
import json
import re

from fakes import FakeEvaluator, ScriptedPolicy, src
from test_cli_search import PROBLEM

from stratagem.cli import main
from stratagem.config import load_config
from stratagem.core.text import clip
from stratagem.domains.pytorch.problem import load_problem
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

WORDS = " ".join(f"w{i:03d}" for i in range(150))
"""A 749-character reason of whole words `w000 w001 ...`: a cut inside one leaves `w01`."""


def test_clip_cuts_at_words():
    assert clip("short", 10) == "short"
    text = "alpha beta gamma delta epsilon"
    for n in range(8, len(text)):
        out = clip(text, n)
        assert len(out) <= n and out.endswith("...")
        assert all(w in text.split() for w in out[:-3].split()), out  # only whole words
    assert clip("alpha beta gamma", 13) == "alpha beta..."  # the word before the cut is whole: kept
    assert clip("path /usr/lib/python3.11/site-packages/torch/utils/cpp_extension.py failed", 40) \
        == "path /usr/lib/python3.11/..."  # one long token: after its last separator
    assert clip("x" * 50, 20) == "x" * 17 + "..."  # no boundary at all: the only cut there is
    assert clip("first line\nsecond line of the reason", 20) == "first line\nsecond..."


def test_show_cuts_the_reason_at_a_word_and_its_json_keeps_all_of_it(tmp_path, capsys, monkeypatch):
    cfg = load_config(None, {"search": {"iterations": 1}})
    problem = load_problem(PROBLEM)
    with RunStore.open(tmp_path / "r") as store:
        store.add_problem(problem)
        store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
        policy = ScriptedPolicy([[src("a", 0.5), src("b", invalid=WORDS)]])
        asyncio.run(SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), policy)).run())  # type: ignore[arg-type]
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["show", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    shown = re.findall(r"\bw\d+\b", text)
    assert shown and all(len(w) == 4 for w in shown), [w for w in shown if len(w) != 4]  # no word cut
    assert "w149" not in text and "..." in text  # it was shortened
    assert main(["show", str(tmp_path / "r"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    failed = next(d for d in out["all_designs"] if not d["valid"])
    assert failed["reason"].endswith(WORDS) and WORDS in failed["report"]
