"""A command problem whose reference is a template (issue 27, item 2; docs/tune.md): template
parameters have defaults (`default=`, else the first value), the harness builds the reference at
them, and without a model (or with `--policy tune` and no `--design`) the run tunes the
reference's template. examples/command/blocked_scan_templated, on the real sandboxed CPU harness."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stratagem.cli import main
from stratagem.config import load_config
from stratagem.core.search import MEASURED
from stratagem.core.template import TemplateError, parse_template, render_defaults
from stratagem.domains import get_domain, load_problem
from stratagem.domains.command import problem as problems
from stratagem.errors import ProblemError
from stratagem.search import state as st
from stratagem.search.policies.registry import TuneSettings, policy_name
from stratagem.search.policies.tune import TAG_PARAMS, TunePolicy, reference_template
from stratagem.store.sqlite import RunStore

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "command" / "blocked_scan_templated"
FAST_TIMING = """
[timing]
pairs = 4
runs = 2
warmup = 0
"""


def test_parameters_have_defaults() -> None:
    t = parse_template({"k.c": "// stratagem: param B = pow2(1, 64, default=8)\n"
                               "// stratagem: param S = int(2, 10, step=2, default=6)\n"
                               "// stratagem: param A = choice(\"long\", \"int\", default=\"int\")\n"
                               "// stratagem: param U = int(1, 4)\n"
                               "// stratagem: require B * S <= 64\n"
                               "#define B {{B}}\n#define S {{S}}\n#define U {{U}}\ntypedef {{A}} acc;\n"})
    assert t.defaults == {"B": 8, "S": 6, "A": "int", "U": 1}  # U: its first value
    built = render_defaults(t.files)["k.c"]
    assert "#define B 8\n" in built and "typedef int acc;" in built and "{{" not in built
    assert render_defaults({"k.c": "int main() { return 0; }\n"}) == {"k.c": "int main() { return 0; }\n"}
    with pytest.raises(TemplateError, match=r"k.c:1: B: default=3 is not a value"):
        parse_template({"k.c": "// stratagem: param B = pow2(1, 64, default=3)\n#define B {{B}}\n"})
    with pytest.raises(TemplateError, match=r"k.c:1: the defaults .* violate B >= 4"):
        parse_template({"k.c": "// stratagem: param B = pow2(1, 64, default=2)\n// stratagem: require B >= 4\n"
                               "#define B {{B}}\n"})
    # no declared default: the template still tunes, but it cannot be built as it is
    first = {"k.c": "// stratagem: param B = pow2(1, 64)\n// stratagem: require B >= 4\n#define B {{B}}\n"}
    assert parse_template(first).defaults == {"B": 1}
    with pytest.raises(TemplateError, match=r"declare defaults"):
        render_defaults(first)


def test_the_harness_builds_a_templated_reference_at_its_defaults() -> None:
    problem = load_problem(EXAMPLE)
    b = problems.bundle_of(problem.source)
    written = b.reference_source_files()
    own = parse_template(written)
    assert own.defaults == {"BLOCK": 4, "GROUP": 2, "ACC": "unsigned long long"}
    built = b.reference_files()
    assert built == own.render(own.defaults) and "{{" not in built["scan.c"] and "#define BLOCK 4\n" in built["scan.c"]
    # what the agents and the offline model see is the program as built
    assert "{{" not in get_domain("command").prompts.offline_design(problem)
    # the template tune uses by default is the reference as written; without a model, tune is the policy
    template = reference_template(problem)
    assert template is not None and template.id == own.id
    assert policy_name(load_config(None, {}), problem) == "tune"
    policy = TunePolicy.from_settings(TuneSettings(), problem, 0)
    assert policy.template is not None and policy.template.id == own.id


def test_a_reference_whose_defaults_cannot_be_built_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "p"
    shutil.copytree(EXAMPLE, root)
    scan = root / "reference" / "scan.c"
    scan.write_text(scan.read_text().replace("default=4)", "default=4096)").replace("default=2)", "default=8)"))
    with pytest.raises(ProblemError, match=r"files.reference`: reference/scan.c:6: the defaults .* violate"):
        load_problem(root)


@pytest.mark.slow  # three evaluations on the real CPU harness, a few seconds each
def test_without_a_model_the_run_tunes_the_reference_template(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "blocked_scan_templated"
    shutil.copytree(EXAMPLE, root)
    toml = (root / "problem.toml").read_text().replace("n = [12000, 16000]", "n = [6000, 8000]")
    (root / "problem.toml").write_text(toml.split("[timing]")[0] + FAST_TIMING)
    code = main(["run", str(root), "--iterations", "3", "--device", "cpu", "--run-dir", str(tmp_path / "r")])
    out = "".join(capsys.readouterr())
    assert code == 0, out
    with RunStore.read(tmp_path / "r") as store:
        assert store.run() is not None and store.run().policy == "tune"  # type: ignore[union-attr]
        views = st.stored_views(store)
    assert len(views) == 3 and all(set(v.tags[TAG_PARAMS]) == {"BLOCK", "GROUP", "ACC"} for v in views)
    # the reference was built (at its defaults) and run beside each point: 64-bit points are measured
    wide = [v for v in views if v.tags[TAG_PARAMS]["ACC"] == "unsigned long long"]
    assert all(v.status in MEASURED and v.speedup is not None for v in wide), [v.report for v in wide]
    assert all("{{" not in v.source for v in views)
