"""Whole runs: the loop, the auto policy's agents and the real CPU harness together; the CLI
with pydantic-ai's TestModel; and a run whose agents talk to a local OpenAI-compatible stub
over HTTP (the wire path, not only in-process test models)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pydantic_ai.models
import pytest
from fakes import FakeEvaluator
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stratagem.cli import main
from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.evaluation.api import make_evaluator
from stratagem.search.loop import SearchLoop
from stratagem.search.policies.auto import AutoPolicy
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/agents"))
from stub_openai import StubOpenAIServer, ToolCall, find_tool  # noqa: E402

ADV = ROOT / "tests/adversarial"
PROBLEM = ADV / "problems/linear_relu.py"
HONEST = (ADV / "honest/addmm_fused.py").read_text()
CHEAT = (ADV / "candidates/shape_hardwired_view.py").read_text()  # passes static checks
WRONG = HONEST.replace("mul_(2.0)", "mul_(2.5)")
HONEST2 = HONEST.replace(".mul_(2.0)", ".mul(2.0)")  # the same result by another program
FAST_EVAL = {"device": "cpu", "timing": {"warmup_ms": 5, "budget_ms": 20, "min_reps": 3, "max_reps": 30}}
FAST_PYTORCH = {"baselines": ["eager"], "correctness_trials": 2}


def _prompts(messages: list[ModelMessage]) -> list[str]:
    return [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)]


def _answer(info: AgentInfo, args: dict) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])


def test_auto_run_with_scripted_agents_on_the_real_harness(tmp_path):
    assert WRONG != HONEST

    def strategist(messages, info):
        return _answer(info, {"strategy": "innovate", "evidence": [], "rationale": "fuse",
                              "instructions": "fuse bias, relu and scale into addmm",
                              "variants": ["with a view of fixed shape", "in place after addmm"]})

    def implementor(messages, info):
        if any("a restatement, not evaluated" in p for p in _prompts(messages)):
            return _answer(info, {"source": HONEST2, "notes": "different"})
        if any("did not pass. The validators reported" in p for p in _prompts(messages)):
            return _answer(info, {"source": HONEST, "notes": "fixed"})
        # the first answer follows the variant in the prompt, not the order the two calls
        # arrive in: "with a view of fixed shape" cheats, "in place after addmm" is wrong
        cheats = any("keep to yours): with a view of fixed shape" in p for p in _prompts(messages))
        return _answer(info, {"source": CHEAT if cheats else WRONG, "notes": "first try"})

    cfg = load_config(None, {"evaluation": FAST_EVAL, "pytorch": FAST_PYTORCH, "agents": {"model": "test", "max_retries": 0},
                             "search": {"iterations": 1, "implementors": 2}})
    problem = load_problem(PROBLEM)
    policy = AutoPolicy.from_config(cfg, problem, tmp_path / "work", models={
        "strategist": FunctionModel(strategist), "implementor": FunctionModel(implementor)})
    with RunStore.open(tmp_path / "run") as store:
        store.add_problem(problem)
        store.start_run(problem.id, "auto", cfg.model_dump(mode="json"))
        loop = SearchLoop(RunSession(cfg, problem, store, make_evaluator(cfg.evaluation), policy))
        out = asyncio.run(loop.run())
        views = {v.source: v for v in loop.session.views()}
        seen = ([(v.author, v.status, v.report[:200]) for v in views.values()],
                [i.note for i in store.iterations()],
                [(c.role, c.ok, c.error, round(c.latency_s, 2)) for c in store.agent_calls()])
        assert CHEAT in views, seen
        assert views[CHEAT].status == "invalid" and views[CHEAT].report.startswith("[shapes]"), seen
        assert views[WRONG].status == "invalid" and views[WRONG].report.startswith("[correctness]"), seen
        # The honest fix passes every check. Its timing may be judged unstable when the machine
        # is busy (a suite running beside it): then it is named but not ranked, as designed.
        honest = views[HONEST]
        assert honest.status in ("valid", "unstable"), honest.report
        assert honest.author in ("implementor-1", "implementor-2")
        # Ranked first when stable; the run's best only if it beats eager by more than its
        # interval (addmm vs linear is about as fast on the CPU)
        if honest.status == "valid" and views[HONEST2].status == "valid":
            assert out.top is not None and out.top.source in (HONEST, HONEST2)
        assert out.best is None or out.best.source in (HONEST, HONEST2)
        # the honest fix both wrote is evaluated once: the second writer is told it restates
        # the first's design and writes another program, evaluated in its turn
        assert len(store.evaluations()) == 4, seen
        roles = [c.role for c in store.agent_calls()]
        assert roles.count("strategist") == 1 and roles.count("implementor") == 5
        it = store.iterations()[0]
        assert it.status == "done" and it.plan["strategy"] == "innovate"
        assert set(it.context_ids) == {"best", "worst", "recent", "failed"}
        assert set(it.design_ids) == {views[s].id for s in (CHEAT, WRONG, HONEST, HONEST2)}


def test_cli_run_with_the_test_model_completes(tmp_path, capsys):
    cfg = tmp_path / "fast.toml"
    cfg.write_text('[pytorch]\nbaselines = ["eager"]\ncorrectness_trials = 2\n'
                   "[pytorch.timing]\nwarmup_ms = 5\nbudget_ms = 20\nmin_reps = 3\nmax_reps = 30\n")
    code = main(["run", str(PROBLEM), "--model", "test", "--iterations", "1", "--implementors", "1",
                 "--device", "cpu", "--run-dir", str(tmp_path / "run"), "--config", str(cfg), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["stop_reason"].startswith("iterations") and out["iterations"] == 1
    # The offline model's design is about as fast as eager: ranked, but best/ may hold the reference
    assert out["fastest"] is not None and Path(out["best_path"]).exists()
    assert out["best"] is None or out["best"]["beats_reference"]
    assert out["spend"]["queries"] >= 2 and out["spend"]["evaluations"] >= 1
    assert main(["show", str(tmp_path / "run"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "finished" and shown["valid"] >= 1


def test_a_run_through_the_openai_wire_protocol(tmp_path, monkeypatch):
    """Strategist and Implementor answer over HTTP from a stub speaking chat completions."""
    monkeypatch.setattr(pydantic_ai.models, "ALLOW_MODEL_REQUESTS", True)  # the stub is local
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    source = HONEST + "\n# runtime_ms=0.25\n"  # the fake evaluator reads its verdict from this

    def reply(request):
        out = find_tool(request, "final_result")
        assert out is not None, "every role answers through the output tool"
        props = out["function"]["parameters"].get("properties", {})
        name = out["function"]["name"]
        if "strategy" in props:
            return ToolCall(name, {"strategy": "innovate", "evidence": [], "rationale": "r",
                                   "instructions": "fuse"})
        if "source" in props:
            return ToolCall(name, {"source": source, "notes": "n"})
        raise AssertionError(f"unexpected output schema {sorted(props)}")

    with StubOpenAIServer([reply] * 10) as stub:
        cfg = load_config(None, {"agents": {"model": "stub-model", "endpoints": [stub.base_url],
                                            "max_retries": 0, "request_timeout_s": 20},
                                 "search": {"iterations": 1, "implementors": 1}})
        problem = load_problem(PROBLEM)
        policy = AutoPolicy.from_config(cfg, problem, tmp_path / "work")
        with RunStore.open(tmp_path / "run") as store:
            store.add_problem(problem)
            store.start_run(problem.id, "auto", cfg.model_dump(mode="json"))
            loop = SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), policy))  # type: ignore[arg-type]
            out = asyncio.run(asyncio.wait_for(loop.run(), timeout=60))
            calls = store.agent_calls()
        assert len(stub.requests) == 2 and {r["model"] for r in stub.requests} == {"stub-model"}
    assert out.best is not None and out.best.source == source
    assert [c.role for c in calls] == ["strategist", "implementor"]
    assert all(c.ok and c.input_tokens == 10 and c.output_tokens == 5 for c in calls)
    sent = json.dumps(stub.requests[1]["messages"])
    assert "fuse" in sent  # the plan's instructions reached the implementor over the wire


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATAGEM_CACHE_DIR", str(tmp_path / "cache"))
