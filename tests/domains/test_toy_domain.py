"""The Domain seam: a third domain defined only in this folder (`toy.py`: a pure-Python function
to speed up, checked and timed by its own worker module in the real sandbox) runs through
`stratagem eval`, a search with a scripted policy and `show` end to end, with the core alone
and without a line of it in the generic layers."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import toy
from pydantic import BaseModel, ConfigDict, Field

from stratagem import domains
from stratagem.cli import main
from stratagem.config import load_config
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.evaluation.api import make_evaluator
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))
from fakes import ScriptedPolicy  # noqa: E402

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "toy"
PROBLEM = FIX / "sum_squares.toy.py"


HERE = str(Path(__file__).resolve().parent)  # where toy_worker.py is


@pytest.fixture
def toy_domain(monkeypatch):  # type: ignore[no-untyped-def]
    """The toy registered, its worker module on the sandbox's path (the parent's PYTHONPATH
    reaches the worker), and a variable of its own the sandbox must keep (`keep_env`)."""
    monkeypatch.setenv("PYTHONPATH", HERE)
    monkeypatch.setenv("TOY_SETTING", "kept")
    monkeypatch.setenv("UNLISTED_SETTING", "scrubbed")
    domains.register(toy.DOMAIN)
    yield toy.DOMAIN
    domains.unregister("toy")


def test_the_toy_domain_writes_the_core_alone() -> None:
    """No stubs: every optional member of `Domain` and of its `Task` is the base class's own."""
    from stratagem.domains.base import Domain, Task

    optional = ("settings", "baselines", "peaks", "reference_facts", "prebuild", "export", "written_reference",
                "graphs", "normal_form", "policies", "measure")
    assert not set(optional) & set(vars(toy.ToyDomain)), "the toy writes an optional member"
    assert all(getattr(toy.DOMAIN, name) is None for name in optional[:7])
    assert not toy.DOMAIN.graphs
    assert set(vars(toy.ToyDomain)) >= Domain.__abstractmethods__  # and every core one
    task_optional = {n for n, v in vars(Task).items() if callable(v) and not n.startswith("_")} - Task.__abstractmethods__
    assert task_optional >= {"with_reference_expectation", "request_seeds", "compile_timeout_s", "agent_facts"}
    assert not task_optional & set(vars(toy.ToyTask)), "the toy's Task writes an optional member"
    assert set(vars(toy.ToyTask)) >= Task.__abstractmethods__


def test_eval_judges_a_design_of_another_domain(toy_domain, capsys) -> None:
    assert main(["eval", str(PROBLEM), str(FIX / "closed_form.py"), "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "valid", out["failures"]
    assert list(out["validators"]) == ["syntax", "check", "timing"]
    assert out["environment"]["worker_module"] == "toy_worker"  # check and timing ran in the sandbox
    assert out["speedup"] > 5 and out["speedup_ci"][0] > 1  # closed form vs a 20000-step loop
    assert out["runtime_ms"] < out["reference_paired_ms"]
    assert main(["eval", str(PROBLEM), str(FIX / "off_by_one.py"), "--device", "cpu", "--json"]) == 0
    bad = json.loads(capsys.readouterr().out)
    assert bad["status"] == "invalid" and bad["failures"][0]["kind"] == "wrong_output"
    assert main(["eval", str(PROBLEM), str(FIX / "closed_form.py"), "--device", "cpu"]) == 0
    assert "speedup vs the reference" in capsys.readouterr().out  # the text view: a domain without its own label


def test_a_search_runs_on_another_domain(toy_domain, tmp_path, capsys) -> None:
    problem = domains.load_problem(PROBLEM)
    assert problem.domain == "toy"
    cfg = load_config(None, {"evaluation": {"device": "cpu"}, "search": {"iterations": 2, "patience": 5}})
    store = RunStore.open(tmp_path / "run")
    store.add_problem(problem)
    store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
    script = [[(FIX / "off_by_one.py").read_text()], [(FIX / "closed_form.py").read_text()]]
    loop = SearchLoop(RunSession(cfg, problem, store, make_evaluator(cfg.evaluation), ScriptedPolicy(script)))
    out = asyncio.run(loop.run())
    assert out.best is not None and "// 6" in out.best.source and out.best.speedup > 5
    written = out.best_path.read_text()
    assert written.startswith("# stratagem") and "load_reference_state_dict" not in written  # no PyTorch footer
    assert [v.status for v in loop.session.views()] == ["invalid", "valid"]
    assert main(["show", str(store.run_dir), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["best"]["id"] == out.best.id
    assert shown["domain"] == "toy" and shown["objective"] == {"name": "runtime", "unit": "ms", "direction": "minimize"}


def test_an_unclaimed_file_names_the_domains(tmp_path) -> None:
    odd = tmp_path / "p.txt"
    odd.write_text("x")
    with pytest.raises(Exception, match="no domain reads this kind of file"):
        domains.load_problem(odd)
    with pytest.raises(Exception, match="problem file not found: .*absent.py"):  # not "no domain reads"
        domains.load_problem(tmp_path / "absent.py")
    with pytest.raises(Exception, match="no domain is called 'cuda-recipe'"):
        domains.get_domain("cuda-recipe")


def test_a_design_of_several_files_is_stored_and_judged_whole(toy_domain, tmp_path) -> None:
    """The Session takes a design's other files beside its main one; the domain's commands
    see them all, the store keeps them, and a different helper is a different design."""
    from stratagem.core.search import IterationResult, Plan

    seen = []

    class TwoFiles(ScriptedPolicy):
        async def iterate(self, state, session):  # type: ignore[no-untyped-def]
            main_src = "from helper import closed\n\n\ndef f(n):\n    return closed(n)\n"
            good = "def closed(n):\n    return (n - 1) * n * (2 * n - 1) // 6\n"
            bad = "def closed(n):\n    return 0\n"
            for helper in (good, bad):
                seen.append(await session.evaluate(main_src, strategy="explore", files={"helper.py": helper}))
            return IterationResult(plan=Plan("explore"), design_ids=tuple(f.design_id for f in seen), exhausted=True)

    problem = domains.load_problem(PROBLEM)
    cfg = load_config(None, {"evaluation": {"device": "cpu"}, "search": {"iterations": 1}})
    store = RunStore.open(tmp_path / "run")
    store.add_problem(problem)
    store.start_run(problem.id, "scripted", cfg.model_dump(mode="json"))
    asyncio.run(SearchLoop(RunSession(cfg, problem, store, make_evaluator(cfg.evaluation), TwoFiles([]))).run())
    good, bad = seen
    assert good.status == "valid" and bad.status == "invalid" and good.design_id != bad.design_id
    rec = store.design(good.design_id)
    assert rec is not None and set(rec.files) == {"candidate.py", "helper.py"}


def test_the_worker_entry_point_runs_the_module_the_domain_declares(toy_domain, tmp_path) -> None:
    """The worker module is the domain's to name (`ToyDomain.worker`, a module outside
    `stratagem`): the parent writes it into the request, and the sandboxed worker entry point
    runs it without loading the domain registry or pydantic, with the variables the domain
    keeps and its cache in the slot's folder (nothing else of the parent's)."""
    from stratagem.config import EvaluationConfig, environment
    from stratagem.core.graph import ValidatorSpec
    from stratagem.evaluation.sandbox import SandboxSettings, run_worker
    from stratagem.worker_api.protocol import EvalResponse

    problem = domains.load_problem(PROBLEM)
    domain = domains.get_domain(problem.domain)
    settings = SandboxSettings(timeout_s=60, base_env=environment(), tmp_root=tmp_path, cache_dir=tmp_path / "slot")
    for fixture, outcome in (("closed_form.py", "passed"), ("off_by_one.py", "failed")):
        design = candidate_design((FIX / fixture).read_text())
        req = domain.open(problem, EvaluationConfig()).build_request(design, [ValidatorSpec("check", (), "worker")])
        assert req.worker_module == "toy_worker" and req.judge_module is None and req.keep_env == ["TOY_*"]
        ran = asyncio.run(run_worker(req.model_dump_json(), settings))
        assert ran.returncode == 0 and ran.response_text is not None, ran.stderr_tail
        response = EvalResponse.model_validate_json(ran.response_text)
        assert response.request_id == req.request_id
        assert [(r.name, r.outcome) for r in response.results] == [("check", outcome)]
        assert response.environment == {"worker_module": "toy_worker", "pydantic_loaded": False,
                                        "TOY_SETTING": "kept", "TOY_CACHE_DIR": str(tmp_path / "slot" / "toy")}


# -- the edges ask the domain: bench's problems, the config section, the CLI's options ---------


class _Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rounds: int = Field(default=1, ge=1)
    integrity: str = "lenient"


class _ToyWithSettings(toy.ToyDomain):
    """The toy with a config section of its own (`[toyset]`), still written only here."""

    name = "toyset"
    settings = _Knobs


@pytest.fixture
def toyset():  # type: ignore[no-untyped-def]
    domains.register(_ToyWithSettings())
    yield
    domains.unregister("toyset")


def test_bench_finds_a_problem_of_a_registered_domain(toy_domain, tmp_path) -> None:
    """What a problem is, `bench` asks the domains (`Domain.claims`): a toy problem in a suite
    folder is one, beside a PyTorch one, and nothing else there is."""
    from stratagem.search.suite_problems import find_problems

    suite = tmp_path / "suite"
    (suite / "toys").mkdir(parents=True)
    (suite / "toys" / "sum_squares.toy.py").write_text(PROBLEM.read_text())
    (suite / "notes.py").write_text("X = 1\n")
    (suite / "1_relu.py").write_text((FIX.parent / "paired" / "problem.py").read_text())
    found = find_problems(suite)
    assert [p.key for p in found] == ["1_relu", "toys-sum_squares.toy"]
    assert domains.load_problem(found[1].path).domain == "toy"
    domains.unregister("toy")
    assert [p.key for p in find_problems(suite)] == ["1_relu"]  # unregistered: not a problem


def test_a_domains_own_section_is_read_by_the_domain(toyset, tmp_path) -> None:
    """`[toyset]` is the domain's section: the config carries it (it knows no domain), the
    domain's `settings` model validates it, and a stored run's config keeps it."""
    from stratagem.config import StratagemConfig, apply_overrides
    from stratagem.domains import check_sections, section_settings
    from stratagem.errors import ConfigError

    p = tmp_path / "c.toml"
    p.write_text('[evaluation]\ndevice = "cpu"\n[toyset]\nrounds = 3\n[pytorch]\nintegrity = "strict"\n')
    cfg = load_config(p)
    check_sections(cfg.evaluation)
    assert section_settings(cfg.evaluation, "toyset") == _Knobs(rounds=3)
    again = StratagemConfig.model_validate(apply_overrides(cfg.model_dump(mode="json"), None))
    assert again.evaluation.domains == {"toyset": {"rounds": 3}, "pytorch": {"integrity": "strict"}}
    p.write_text("[toyset]\nrounds = 0\nbogus = 1\n")
    with pytest.raises(ConfigError, match=r"toyset\.rounds.*toyset\.bogus: unknown setting"):
        check_sections(load_config(p).evaluation)


def test_the_cli_options_land_in_the_problems_domain(toy_domain, toyset, capsys) -> None:
    """--integrity lands in the section of the domain that claims the problem; a domain
    without that setting is an error naming the option and the domain (exit 2)."""
    from stratagem.cli.common import config_for, domain_over
    from stratagem.domains import section_settings
    from stratagem.errors import ConfigError

    paired = FIX.parent / "paired" / "problem.py"
    assert domain_over("strict", None, paired) == {"pytorch": {"integrity": "strict", "correctness": None}}
    assert domain_over(None, None, PROBLEM) == {}
    assert main(["eval", str(PROBLEM), str(FIX / "closed_form.py"), "--device", "cpu", "--integrity", "strict"]) == 2
    err = capsys.readouterr().out
    assert "--integrity: the toy domain has no such setting" in err
    domains.unregister("toy")  # the toyset claims the same files, and has an integrity setting
    cfg = config_for(None, "cpu", integrity="strict", problem=PROBLEM)
    assert cfg.evaluation.domains == {"toyset": {"integrity": "strict"}}
    assert section_settings(cfg.evaluation, "toyset") == _Knobs(integrity="strict")
    with pytest.raises(ConfigError, match="--correctness: the toyset domain has no such setting"):
        config_for(None, "cpu", correctness="calibrated", problem=PROBLEM)
