"""The run's budgets are limits (`search/budget.py`): every model request is admitted by the
run's budget before it is sent, counting the requests and answers of the calls still in
flight, so a run never sends more than `max_queries` requests (nor passes `max_tokens` or
`max_usd` by more than the answer in hand), whatever its agents' tool calls, and says that the
budget stopped it."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))

from agent_fakes import WRONG_SOURCE, output, tool_returns  # noqa: E402
from fakes import FakeEvaluator  # noqa: E402
from pike_fakes import Script, make_pike_loop  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402

from stratagem.config import SearchConfig, load_config  # noqa: E402
from stratagem.core.search import AgentCall  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.search.budget import Budgets, Spend  # noqa: E402
from stratagem.search.loop import SearchLoop  # noqa: E402
from stratagem.search.policies.auto import AutoPolicy  # noqa: E402
from stratagem.search.session import RunSession  # noqa: E402
from stratagem.store.sqlite import RunStore  # noqa: E402

PROBLEM = Path(__file__).resolve().parents[2] / "examples" / "01_elementwise" / "problem.py"


class Counted:
    """A scripted model's function, counting every request it answers (from any thread)."""

    def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
        self.fn = fn
        self.n = 0
        self.lock = threading.Lock()

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        with self.lock:
            self.n += 1
        return self.fn(messages, info)


def test_calls_in_flight_count_and_a_request_past_the_budget_is_refused() -> None:
    b = Budgets(SearchConfig(max_queries=3, max_tokens=1000), Spend())
    one, two = b.meter(), b.meter()
    assert one.admit() is None and two.admit() is None and one.admit() is None
    assert b.remaining().queries == 0 and b.exhausted() == "max_queries (3 of 3)"  # none recorded yet
    assert two.admit() == "max_queries (3 of 3)"
    one.close()  # recorded as it ends: the record is the spend from now on
    b.spend.add_call(AgentCall(role="implementor", model="m", prompt_hash="h", requests=2))
    assert b.exhausted() == "max_queries (3 of 3)" and b.meter().admit() is not None
    # tokens (and money) the same way: an answer counts as it arrives
    t = Budgets(SearchConfig(max_tokens=100, max_usd=1.0), Spend())
    m = t.meter()
    assert m.admit() is None
    m.answered(60, 0.5)
    assert m.admit() is None and t.remaining().tokens == 40 and t.remaining().usd == 0.5
    m.answered(60, 0.1)
    assert m.admit() == "max_tokens (120 of 100)"
    u = Budgets(SearchConfig(max_usd=1.0), Spend())
    n = u.meter()
    assert n.admit() is None
    n.answered(10, 1.2)
    assert u.meter().admit() == "max_usd (1.2 of 1)"


USAGE = RequestUsage(input_tokens=10, output_tokens=5)
"""Every scripted answer's reported tokens (15)."""


def plan_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    plan = output(info, {"strategy": "innovate", "evidence": [], "rationale": "start", "instructions": "go",
                         "variants": ["one fused kernel", "two kernels"]})
    return ModelResponse(parts=plan.parts, usage=USAGE)


def busy_implementor(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """An Implementor that writes notes with tool calls (30 per turn) before each answer, and
    whose answers are always wrong (each a new program): unbounded, it would ask far more than
    the budget."""
    last = max(i for i, m in enumerate(messages) if isinstance(m, ModelRequest)
               and any(isinstance(p, UserPromptPart) for p in m.parts))
    if len(tool_returns(messages[last:], "write_file")) < 30:
        return ModelResponse(parts=[ToolCallPart("write_file", {"path": "notes.md", "content": "x"})], usage=USAGE)
    turns = sum(isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts) for m in messages)
    answer = output(info, {"source": f"{WRONG_SOURCE}\n_ATTEMPT = {turns}\n", "notes": "n"})
    return ModelResponse(parts=answer.parts, usage=USAGE)


def auto_loop(tmp_path: Path, models: dict, **search) -> tuple[SearchLoop, RunStore]:  # type: ignore[type-arg]
    cfg = load_config(None, {"agents": {"model": "test", "max_retries": 0},
                             "search": {"implementors": 2, "seed": 7, "patience": 20, "iterations": 20, **search}})
    problem = load_problem(PROBLEM)
    store = RunStore.open(tmp_path / "run")
    store.add_problem(problem)
    store.start_run(problem.id, "auto", cfg.model_dump(mode="json"))
    policy = AutoPolicy.from_config(cfg, problem, tmp_path / "work", models=models)
    return SearchLoop(RunSession(cfg, problem, store, FakeEvaluator(), policy)), store  # type: ignore[arg-type]


def test_auto_sends_at_most_max_queries_requests_whatever_its_agents_tool_calls(tmp_path) -> None:
    strategist, implementor = Counted(plan_fn), Counted(busy_implementor)
    loop, store = auto_loop(tmp_path, {"strategist": FunctionModel(strategist),
                                       "implementor": FunctionModel(implementor)}, max_queries=12)
    out = asyncio.run(loop.run())
    sent = strategist.n + implementor.n
    assert sent == 12, (strategist.n, implementor.n)  # the budget, to the request: never past it
    assert out.spend.queries == 12 and sum(c.requests for c in store.agent_calls()) == 12
    assert out.stop_reason == "max_queries (12 of 12)"
    notes = " ".join(i.note for i in store.iterations())
    assert "stopped: budget: BudgetSpent: the run's budget is spent: max_queries" in notes, notes


def test_auto_keeps_to_max_tokens_by_the_answers_in_flight(tmp_path) -> None:
    implementor = Counted(busy_implementor)
    loop, store = auto_loop(tmp_path, {"strategist": FunctionModel(plan_fn),
                                       "implementor": FunctionModel(implementor)}, max_tokens=400)
    out = asyncio.run(loop.run())
    # each answer's tokens count as it arrives, the two Implementors see each other's: the run
    # passes the limit by at most the answers already on their way when it was reached
    assert out.stop_reason.startswith("max_tokens")
    assert 400 <= out.spend.tokens <= 400 + 2 * 15, out.spend.tokens
    assert implementor.n <= 400 // 15 + 1


def test_a_pike_policy_sends_at_most_max_queries_requests(tmp_path) -> None:
    script = Script(bad=lambda n: True, fix_fails=True)
    counted = Counted(script)
    loop, store, _ = make_pike_loop(tmp_path, "pike-o", counted, max_queries=7,  # type: ignore[arg-type]
                                    settings={"parallel_evaluations": 3, "max_fix_attempts": 2})
    out = asyncio.run(loop.run())
    assert counted.n == 7 and out.spend.queries == 7
    assert out.stop_reason == "max_queries (7 of 7)"
