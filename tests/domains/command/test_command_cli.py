"""`stratagem eval PROBLEM_DIR DESIGN_DIR` on a command problem, and `stratagem run` without a
model saying what can be done instead."""

from __future__ import annotations

import json

from command_fixtures import EXAMPLE, example_design

from stratagem.cli import main
from stratagem.search.api import show_run
from stratagem.store.sqlite import RunStore


def test_eval_takes_a_problem_directory_and_a_design_directory(small_problem, tmp_path, capsys) -> None:
    design = tmp_path / "fast"
    design.mkdir()
    for name, text in example_design("fast").items():
        (design / name).write_text(text)
    (design / ".notes").write_text("hidden files are not part of a design")
    run_dir = tmp_path / "run"
    code = main(["eval", str(small_problem), str(design), "--device", "cpu", "--json", "--run-dir", str(run_dir)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "valid", out["failures"]
    assert list(out["validators"]) == ["static_checks", "build", "correctness", "timing"]
    assert out["speedup"] > 1 and out["speedup_ci"][0] <= out["speedup"] <= out["speedup_ci"][1]
    assert out["sandbox"]["network_isolated"] in (True, False)
    assert list(out["reference_ms"]) == list(out["speedups"]) == ["reference"]  # the domain's own key
    with RunStore.read(run_dir) as store:
        assert [e.status for e in store.evaluations()] == ["valid"]
        assert list(store.evaluations()[0].speedups) == ["reference"]
        design_id = store.evaluations()[0].design_id
    # an evaluation's directory (no run record) exports its design as the problem's main file:
    # by default when it is ranked; on a machine too loaded for its timing to settle it is not,
    # and is named instead (`pick` then has no best to default to)
    ranked = show_run(run_dir).best is not None
    assert main(["export", str(run_dir), *([] if ranked else [design_id[:12]])]) == 0
    assert capsys.readouterr().out.startswith("// stratagem")


def test_a_design_given_as_one_file_is_the_problems_main_file(small_problem, tmp_path) -> None:
    """A file, whatever its name, is the domain's main file (a command problem's first editable
    file; PyTorch's candidate.py); a directory is a design's files; what cannot be a design is
    refused naming the path."""
    from stratagem.domains import load_problem
    from stratagem.errors import CandidateError
    from stratagem.evaluation.api import read_design

    mine = tmp_path / "my_kernel.c"
    mine.write_text(example_design("fast")["kernel.c"])
    assert read_design(mine, load_problem(small_problem)).files == {"kernel.c": mine.read_text()}
    torch_problem = load_problem(EXAMPLE.parents[2] / "tests/fixtures/problem_linear.py")
    assert list(read_design(mine, torch_problem).files) == ["candidate.py"]
    empty = tmp_path / "empty"
    empty.mkdir()
    for bad, said in ((empty, "holds no file"), (tmp_path / "missing.c", "not found")):
        try:
            read_design(bad, torch_problem)
        except CandidateError as e:
            assert said in str(e) and str(bad) in str(e)
        else:
            raise AssertionError(f"{bad} was read as a design")


def test_eval_reports_a_problem_file_error_naming_the_key(tmp_path, capsys) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "problem.toml").write_text('[files]\neditable = "kernel.c"\n')
    design = tmp_path / "d"
    design.mkdir()
    (design / "kernel.c").write_text("")
    assert main(["eval", str(bad), str(design), "--device", "cpu"]) == 2
    err = capsys.readouterr()
    text = " ".join((err.out + err.err).split())
    assert "problem.toml" in text and "files.editable" in text


def test_run_without_a_model_says_what_to_do_instead(capsys) -> None:
    code = main(["run", str(EXAMPLE), "--device", "cpu", "--iterations", "1"])
    err = capsys.readouterr()
    text = " ".join((err.out + err.err).split())
    assert code == 2
    assert "command problem" in text and "stratagem eval" in text
