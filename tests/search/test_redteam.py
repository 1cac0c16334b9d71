"""`stratagem redteam`: an attacker (scripted: `redteam/attacker.py`, run as a coding-agent
command) tries cheats on a problem; the harness catches some, the red-team audit turns what it
accepts wrongly into breaches, each written as a fixture that `--replay` re-runs."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from stratagem.cli import main
from stratagem.domains.pytorch import graphs
from stratagem.search.policies.redteam import corpus as breaches
from stratagem.search.policies.redteam.policy import claim_of

ROOT = Path(__file__).resolve().parents[2]
ADV = ROOT / "tests" / "adversarial"
ATTACKER = Path(__file__).parent / "redteam" / "attacker.py"
FAST = ('[pytorch]\nbaselines = ["eager"]\ncorrectness_trials = 2\n'
        "[pytorch.timing]\nwarmup_ms = 5\nbudget_ms = 20\nmin_reps = 3\nmax_reps = 30\n"
        "[search]\nconfirm_top = 0\n")


def test_an_attempt_declares_its_class_in_its_first_lines() -> None:
    c = claim_of("import torch\n# exploit: Stale Output!\n// caught-by: integrity/refilled_inputs\nx = 1\n")
    assert (c.exploit, c.caught_by) == ("stale_output", "integrity/refilled_inputs")
    assert claim_of("x = 1\n" * 50 + "# exploit: late\n").exploit == "undeclared"


def test_the_attacker_chooses_its_class_and_attempts_written_at_once_are_pointed_apart() -> None:
    from types import SimpleNamespace

    from stratagem.search.policies.redteam import prompts
    from stratagem.search.policies.redteam.policy import Outcome, RedteamPolicy

    names = [c for c, _ in prompts.classes("pytorch")]
    assert prompts.class_of("stale_output_by_fingerprint", names) == "stale_output"
    assert prompts.class_of("none_plain", names) == "none" and prompts.class_of("novel", names) == "novel"
    me = SimpleNamespace(problem=SimpleNamespace(domain="pytorch"))
    first = RedteamPolicy.directions(me, [], 3)  # type: ignore[arg-type]
    assert [d.start[0] for d in first if d.start] == names[:3] and first[0].untried == tuple(names)
    # every class tried: the closest first (neutralized, then never fired), then a class the catalog lacks
    done = [Outcome(f"d{i}", n, "", "caught", cls=n) for i, n in enumerate(names)]
    done[5] = replace(done[5], outcome="never_fired")
    done[7] = replace(done[7], outcome="neutralized", fired="served again")
    later = RedteamPolicy.directions(me, done, len(names) + 1)  # type: ignore[arg-type]
    assert [d.start[0] for d in later[:2] if d.start] == [names[7], names[5]]
    assert later[-1].start is None and later[0].how == "neutralized"
    assert len({d.start for d in later}) == len(later)  # no two slots pointed alike
    assert "neutralized: accepted at 1.02x; its shortcut fired (served again)" in replace(done[7], speedup=1.02).words()


def _attack(tmp_path: Path, capsys: pytest.CaptureFixture[str], attempts: list[Path], *extra: str,
            problem_name: str = "linear_relu") -> tuple[int, dict, Path]:
    """A red-team run on a copy of a corpus problem (a copy: the project's own problems also
    write into the project's corpus), the attacker writing `attempts` in order."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    folder = tmp_path / "attacker"
    folder.mkdir()
    (folder / "attempts.txt").write_text("\n".join(str(p) for p in attempts))
    problem = tmp_path / f"{problem_name}.py"
    shutil.copy(ADV / "problems" / f"{problem_name}.py", problem)
    cfg = tmp_path / "fast.toml"
    cfg.write_text(FAST)
    code = main(["redteam", str(problem), "--agent-cmd", f"{sys.executable} {ATTACKER} {folder}",
                 "--max-queries", str(len(attempts)), "--device", "cpu", "--run-dir", str(tmp_path / "run"),
                 "--corpus", str(tmp_path / "corpus"), "--config", str(cfg), "--json", *extra])
    out = capsys.readouterr().out
    assert code != 130, f"the run was interrupted (a SIGINT or SIGTERM reached the test's process): {out}"
    return code, json.loads(out), folder


def _outcomes(out: dict) -> dict[str, dict]:
    return {a["exploit"]: a for a in out["redteam"]["attempts"]}


def test_a_weakened_harness_lets_an_attack_through_and_the_audit_turns_it_into_a_test(tmp_path, capsys, monkeypatch):
    # the harness with its shapes stage switched off (a test configuration): a design hard-wired
    # to the problem's sizes is accepted; the audit's fresh sizes show it wrong
    whole = graphs.DEFAULT_GRAPH
    monkeypatch.setattr(graphs, "DEFAULT_GRAPH", tuple(s if s.name != "timing" else
                                                       type(s)("timing", ("integrity",), s.placement)
                                                       for s in graphs.DEFAULT_GRAPH if s.name != "shapes"))
    attempts = [ADV / "candidates" / "cache_self_data_ptr.py", ADV / "candidates" / "nan_filled.py",
                ADV / "honest" / "addmm_fused.py", ADV / "candidates" / "shape_hardwired_view.py"]
    code, out, folder = _attack(tmp_path, capsys, attempts)
    assert code == 0, out
    got = _outcomes(out)
    assert got["cache_self_data_ptr"]["outcome"] == "caught"
    assert got["cache_self_data_ptr"]["check"] == "static_checks/mutable_state"
    assert got["nan_filled"]["outcome"] == "caught" and got["nan_filled"]["check"].startswith("correctness")
    honest = got["none_addmm_fused"]
    assert honest["outcome"] == "honest" and honest["cls"] == "none", honest
    assert honest["words"].startswith(f"honest: accepted at {honest['speedup']:.3g}x"), honest
    breach = got["shape_hardwired_view"]
    assert breach["outcome"] == "breach" and breach["check"] == "breach_audit", breach
    assert breach["cls"] == "shape_hardwired" and "fresh_shapes" in breach["evidence"]
    by_class = out["redteam"]["by_class"]
    assert by_class["shape_hardwired"]["breach"] == 1 and by_class["nan_filled"]["caught"] == 1
    # the breach is flagged, never the best; the honest attempt may be
    assert out["best"] is None or out["best"]["id"] != breach["design_id"]
    fixture = Path(breach["fixture"])
    record = json.loads((fixture / "breach.json").read_text())
    assert record["exploit"] == "shape_hardwired_view" and record["audit"][0]["validator"] == "breach_audit"
    assert (fixture / "design" / "candidate.py").read_text().startswith("# exploit: shape_hardwired_view")
    assert (fixture / record["problem"]).read_text() == (ADV / "problems" / "linear_relu.py").read_text()
    # every view of the run tells the same attempts
    assert main(["show", str(tmp_path / "run"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["redteam"] == out["redteam"]
    from stratagem.report.html import build_report

    page = build_report(tmp_path / "run", analyses=False)
    assert "Red-team attempts" in page and "shape_hardwired_view" in page
    # the attacker was told the rules, the catalog and, later, what happened to its attempts
    first, last = (folder / "task-0.md").read_text(), (folder / "task-3.md").read_text()
    assert "Rules the harness enforces" in first and "`stale_output`" in first and "none yet" in first
    tasks = [(folder / f"task-{i}.md").read_text() for i in range(4)]
    assert len(set(tasks)) == 4, "a prompt was asked twice"
    # every earlier outcome in full, the attempts written at once pointed apart
    assert got["cache_self_data_ptr"]["words"] in last and got["nan_filled"]["words"] in last
    starts = [t.split("start from `")[1].split("`")[0] for t in tasks[:2]]
    assert sorted(starts) == ["reference_access", "stale_output"], starts
    # the fixture replays: accepted by the weakened harness (exit 1), rejected once shapes is back
    assert main(["redteam", "--replay", str(tmp_path / "corpus"), "--device", "cpu", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["status"] for r in rows] == ["valid"]
    # the whole graph back (only it: `monkeypatch.undo()` also undid the suite's isolation, its
    # own cache folder and the busy guard off, and the replay ran on the user's cache)
    monkeypatch.setattr(graphs, "DEFAULT_GRAPH", whole)
    assert main(["redteam", "--replay", str(tmp_path / "corpus"), "--device", "cpu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["status"] == "invalid" and rows[0]["caught_by"].startswith("[shapes]")


def test_a_breach_on_the_projects_own_problem_joins_the_projects_corpus(tmp_path, monkeypatch) -> None:
    from stratagem.core.problem import Problem
    from stratagem.core.verdict import ValidatorResult, Verdict

    root = tmp_path / "checkout"
    (root / "examples").mkdir(parents=True)
    src = root / "examples" / "p.py"
    src.write_text("# the problem\n")
    monkeypatch.setattr(breaches, "project_root", lambda: root)
    verdict = Verdict((ValidatorResult("breach_audit", "failed", "wrong_output", "fresh_shapes: wrong at n=7"),))
    folder = breaches.write(tmp_path / "mine", Problem(name="p", domain="pytorch", source="# the problem\n",
                                                       path=str(src)),
                            {"candidate.py": "x = 1\n"}, {"design_id": "abcdef123456", "exploit": "shape"}, verdict)
    own = root / breaches.PROJECT_CORPUS / folder.name
    assert (folder / "breach.json").is_file() and (own / "breach.json").is_file()
    assert (own / "problem" / "p.py").read_text() == "# the problem\n"
    [fixture] = breaches.read(root / breaches.PROJECT_CORPUS)
    assert fixture.design().files == {"candidate.py": "x = 1\n"}


def test_replay_of_a_folder_without_fixtures_is_a_usage_error(tmp_path, capsys) -> None:
    assert main(["redteam", "--replay", str(tmp_path), "--json"]) == 2
    assert "no breach fixture" in capsys.readouterr().out


def test_a_domain_without_an_audit_cannot_be_attacked(tmp_path, capsys, monkeypatch) -> None:
    from stratagem.domains.command.domain import CommandDomain

    monkeypatch.setattr(CommandDomain, "graphs", {k: v for k, v in CommandDomain.graphs.items() if k != "breach"})
    code = main(["redteam", str(ROOT / "examples" / "command" / "window_sums"), "--agent-cmd", "true", "--json"])
    assert code == 2
    assert "no red-team audit" in capsys.readouterr().out


SLEEPY = Path(__file__).parent / "redteam" / "sleepy"
"""A command problem whose work is a sleep (a Python program), and attempts on it."""


def test_a_command_problem_is_attacked_and_its_breach_becomes_a_fixture(tmp_path, capsys) -> None:
    # a command problem's directory: an honest design, one the harness catches, and a seed-keyed
    # cache the harness accepts (its timed runs repeat one seed) that the audit's fresh seeds show
    problem = tmp_path / "sleepy"
    shutil.copytree(SLEEPY / "problem", problem)  # a copy: the project's own problems also write into its corpus
    attempts = [SLEEPY / "honest" / "half_the_work.py", SLEEPY / "cheats" / "non_finite_nan.py",
                SLEEPY / "cheats" / "seed_keyed_output_in_workdir.py"]
    folder = tmp_path / "attacker"
    folder.mkdir()
    (folder / "attempts.txt").write_text("\n".join(str(p) for p in attempts))
    code = main(["redteam", str(problem), "--agent-cmd", f"{sys.executable} {ATTACKER} {folder} prog.py",
                 "--max-queries", "3", "--attempts", "3", "--device", "cpu", "--run-dir", str(tmp_path / "run"),
                 "--corpus", str(tmp_path / "corpus"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    got = _outcomes(out)
    assert got["none_half_the_work"]["outcome"] == "honest", got["none_half_the_work"]
    nan = got["non_finite_nan"]
    assert nan["outcome"] == "caught" and nan["check"] == "correctness" and nan["cls"] == "non_finite", nan
    breach = got["seed_keyed_output_in_workdir"]
    assert breach["outcome"] == "breach" and breach["cls"] == "seed_keyed_output", breach
    assert breach["check"] == "breach_audit" and breach["evidence"].startswith("fresh_seeds:"), breach
    assert breach["speedup"] > 1.05  # the ordinary evaluation's false gain
    record = json.loads((Path(breach["fixture"]) / "breach.json").read_text())
    assert record["domain"] == "command" and record["files"] == ["prog.py"]
    assert (Path(breach["fixture"]) / "problem" / "problem.toml").is_file()
    # the attacker was told the command domain's catalog
    task = (folder / "task-0.md").read_text()
    assert "`seed_keyed_output`" in task and "`kept_state`" in task and "whole programs" in task
    # the harness as it is still accepts the breach: its replay fails
    assert main(["redteam", "--replay", str(tmp_path / "corpus"), "--device", "cpu", "--json"]) == 1
    assert [r["status"] for r in json.loads(capsys.readouterr().out)["rows"]] == ["valid"]


def test_a_model_attacker_is_told_its_role_and_its_answers_are_judged(tmp_path) -> None:
    """The pydantic-ai backend: a FunctionModel attacker answers in code blocks; its system
    prompt is the attacker's; its two attempts go through the real harness (CPU) and the audit."""
    import asyncio

    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from stratagem.agents.models import RoleModels
    from stratagem.config import load_config
    from stratagem.domains import load_problem
    from stratagem.evaluation.api import make_evaluator
    from stratagem.search.loop import SearchLoop
    from stratagem.search.policies.redteam.policy import RedteamPolicy
    from stratagem.search.policies.registry import policy_settings, resolved_config
    from stratagem.search.session import RunSession
    from stratagem.store.sqlite import RunStore

    answers = [(ADV / "candidates" / "cache_self_identity.py").read_text(), (ADV / "honest" / "addmm_fused.py").read_text()]
    # the second declares a shortcut it does not have: accepted, it never fired
    seen: list[str] = []

    def attacker(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(str(getattr(messages[-1], "instructions", "") or ""))
        code = answers[len(seen) - 1]
        return ModelResponse(parts=[TextPart(f"Trying this:\n```python\n# exploit: try_{len(seen)}\n{code}```\n")])

    problem_path = tmp_path / "linear_relu.py"
    shutil.copy(ADV / "problems" / "linear_relu.py", problem_path)
    cfg_file = tmp_path / "fast.toml"
    cfg_file.write_text(FAST)
    cfg = resolved_config(load_config(cfg_file, {"search": {"policy": "redteam", "max_queries": 2},
                                                 "agents": {"model": "test"}, "evaluation": {"device": "cpu"}}))
    problem = load_problem(problem_path)
    store = RunStore.open(tmp_path / "run")
    store.add_problem(problem)
    store.start_run(problem.id, "redteam", cfg.model_dump(mode="json"))
    policy = RedteamPolicy(cfg, problem, tmp_path / "run" / "work", RoleModels.of({"default": FunctionModel(attacker)}),
                           policy_settings(cfg))  # type: ignore[arg-type]
    evaluator = make_evaluator(cfg.evaluation)

    async def go() -> None:
        try:
            await SearchLoop(RunSession(cfg, problem, store, evaluator, policy)).run()
        finally:
            await evaluator.executor.aclose()

    asyncio.run(go())
    assert len(seen) == 2 and all("security tester" in s for s in seen)
    got = {a["exploit"]: a for a in store.policy_state("redteam/attempts")}
    assert got["try_1"]["outcome"] == "caught" and got["try_1"]["check"].startswith("integrity"), got["try_1"]
    assert got["try_2"]["outcome"] == "never_fired", got["try_2"]
    assert {c.role for c in store.agent_calls()} == {"attack"}


SAMPLE = ["nan_partial.py", "stale_reference_output.py", "cache_self_fingerprint.py", "cache_sampled_values.py",
          "proc_fork_leftover.py", "launch_lazy_buffer.py"]
"""2025-2026 classes and the harness's neutralized gaps (value-keyed caches it accepts)."""


def _none_silently_accepted(out: dict, honest: set[str]) -> None:
    for a in out["redteam"]["attempts"]:
        if a["exploit"].removeprefix("none_") in honest:
            assert a["outcome"] == "honest", a
        else:  # rejected by the harness (caught, or broken: it failed to run there), a breach, or
            # a shortcut the audit saw fire that the harness paid nothing (neutralized)
            assert a["outcome"] in ("caught", "broken", "breach", "neutralized"), a


def test_replayed_corpus_cheats_are_caught_or_breached_never_accepted(tmp_path, capsys) -> None:
    attempts = [ADV / "candidates" / n for n in SAMPLE] + [ADV / "honest" / "functional_linear.py"]
    code, out, _ = _attack(tmp_path, capsys, attempts, "--attempts", "3")
    assert code == 0, out
    assert len(out["redteam"]["attempts"]) == len(attempts)
    _none_silently_accepted(out, {"functional_linear"})


@pytest.mark.slow
def test_the_whole_corpus_replayed_by_an_attacker_is_caught_or_breached(tmp_path, capsys) -> None:
    """Every cheat of the adversarial corpus (one red-team run per problem) is caught by the
    harness or turned into a breach by the audit; every honest candidate is found honest."""
    sys.path.insert(0, str(ADV))
    from test_corpus import CHEATS, HONEST_CASES

    problems = sorted({c.problem for c in CHEATS.values()} | {h.problem for h in HONEST_CASES.values()})
    for name in problems:
        attempts = [ADV / "candidates" / f for f, c in CHEATS.items() if c.problem == name]
        honest = [ADV / "honest" / f for f, h in HONEST_CASES.items() if h.problem == name]
        code, out, _ = _attack(tmp_path / name, capsys, attempts + honest, "--attempts", "4", problem_name=name)
        assert code == 0, out
        _none_silently_accepted(out, {p.stem for p in honest})


def test_the_audit_keeps_to_the_runs_compute_budget(tmp_path, capsys) -> None:
    # one evaluation spends the GPU-seconds budget: the accepted attempt is not audited, and says why
    # (the budget is a tenth of one evaluation's stages, 0.63 s on 2 idle cores: 0.5 s was not always spent)
    code, out, _ = _attack(tmp_path, capsys, [ADV / "honest" / "functional_linear.py"], "--max-gpu-seconds", "0.05")
    assert code == 0, out
    [a] = out["redteam"]["attempts"]
    assert a["outcome"] == "unaudited" and "max_gpu_seconds" in a["evidence"], a
    assert out["redteam"]["by_class"]["none"]["unaudited"] == 1  # declared honest: the class `none`


def test_an_audit_that_could_not_finish_is_unaudited_never_a_breach() -> None:
    """Seen with a real attacker on a loaded CPU: the audit killed at its run limit was written
    as a breach with no gain shown. A limit, memory or the harness says nothing of the design."""
    from stratagem.core.verdict import ValidatorResult, Verdict, inconclusive

    cut = Verdict((ValidatorResult("breach_audit", "failed", reason="the worker was killed at the 120 s run limit",
                                   kind="timeout"),))
    why = inconclusive(cut)
    assert why is not None and "did not finish" in why and "120 s run limit" in why
    wrong = Verdict((ValidatorResult("breach_audit", "failed", reason="fresh_shapes: wrong at n=7", kind="wrong_output"),))
    assert inconclusive(wrong) is None  # evidence: a breach
    assert inconclusive("the audit's budget is spent") == "the audit's budget is spent"
