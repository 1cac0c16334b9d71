"""Configuration: defaults < TOML file < CLI overrides; every bad input is a ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from stratagem.config import DEFAULT_TIMEOUT_S, EvaluationConfig, cache_dir, load_config
from stratagem.domains.pytorch.settings import settings
from stratagem.errors import ConfigError


def write(tmp_path: Path, text: str, name: str = "stratagem.toml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_defaults():
    ev = load_config().evaluation
    assert ev.device == "auto"
    assert ev.timeout_s == DEFAULT_TIMEOUT_S == 120.0
    pt = settings(ev)
    assert pt.correctness_trials == 5
    assert pt.baselines is None
    assert ev.network == "deny"
    assert ev.cache_dir is None
    assert (pt.tolerances["float32"].atol, pt.tolerances["float32"].rtol) == (1e-4, 1e-4)
    assert pt.tolerances["bfloat16"].atol == 1e-2
    t = settings(ev).timing
    assert (t.warmup_ms, t.budget_ms, t.min_reps, t.max_reps) == (50.0, 500.0, 10, 1000)
    assert t.flush_l2 is True and t.sync_mode == "stream"


def test_toml_overrides_defaults_and_keeps_unset_values(tmp_path):
    p = write(
        tmp_path,
        '[evaluation]\ndevice = "cpu"\ntimeout_s = 30\n'
        "[pytorch.timing]\nbudget_ms = 100\n[pytorch]\nbaselines = [\"eager\"]\n",
    )
    ev = load_config(p).evaluation
    assert ev.device == "cpu"
    assert ev.timeout_s == 30
    assert settings(ev).baselines == ["eager"]
    assert settings(ev).timing.budget_ms == 100
    assert settings(ev).timing.warmup_ms == 50.0  # untouched default in the same section
    assert settings(ev).correctness_trials == 5


def test_cli_overrides_win_over_toml_and_merge_deeply(tmp_path):
    p = write(
        tmp_path,
        '[evaluation]\ndevice = "cpu"\ntimeout_s = 30\n[pytorch.timing]\nbudget_ms = 100\nmin_reps = 4\n',
    )
    ev = load_config(
        p, {"evaluation": {"timeout_s": 10, "timing": {"budget_ms": 7}}}
    ).evaluation
    assert ev.timeout_s == 10  # CLI wins
    assert settings(ev).timing.budget_ms == 7  # CLI wins, nested
    assert ev.device == "cpu"  # TOML kept where CLI is silent
    assert settings(ev).timing.min_reps == 4  # nested TOML sibling kept


def test_cli_none_values_are_ignored(tmp_path):
    p = write(tmp_path, "[evaluation]\ntimeout_s = 30\n")
    ev = load_config(p, {"evaluation": {"timeout_s": None, "device": None, "timing": {"budget_ms": None}}}).evaluation
    assert ev.timeout_s == 30
    assert ev.device == "auto"
    assert settings(ev).timing.budget_ms == 500.0


@pytest.mark.parametrize(
    "toml",
    [
        "bogus = 1\n",
        "[evaluation]\nbogus = 1\n",
    ],
    ids=["top", "evaluation"],
)
def test_unknown_keys_in_file_raise_config_error(tmp_path, toml):
    p = write(tmp_path, toml)
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert not isinstance(ei.value, ValidationError)
    assert "bogus" in str(ei.value)
    assert str(p) in str(ei.value)


def test_unknown_override_key_raises_config_error():
    with pytest.raises(ConfigError, match="bogus") as ei:
        load_config(None, {"evaluation": {"bogus": 1}})
    assert not isinstance(ei.value, ValidationError)


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:0:1", "mps", ""])
def test_invalid_device_raises_config_error(device):
    with pytest.raises(ConfigError, match="device"):
        load_config(None, {"evaluation": {"device": device}})


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_valid_devices(device):
    assert load_config(None, {"evaluation": {"device": device}}).evaluation.device == device


@pytest.mark.parametrize(
    "over",
    [
        {"timeout_s": 0},
        {"network": "maybe"},
    ],
)
def test_invalid_values_raise_config_error(over):
    with pytest.raises(ConfigError):
        load_config(None, {"evaluation": over})


@pytest.mark.parametrize(
    "toml, key",
    [
        ('[pytorch.tolerances.float32]\natol = 1e-3\nrtol = 1e-3\nbogus = 1\n', "pytorch.tolerances.float32.bogus"),
        ("[pytorch]\ncorrectness_trials = 0\n", "pytorch.correctness_trials"),
        ('[pytorch]\nbaselines = ["turbo"]\n', "pytorch.baselines.0"),
        ("[pytorch]\nbogus = 1\n", "pytorch.bogus"),
        ("[pytorch.timing]\nbogus = 1\n", "pytorch.timing.bogus"),
        ("[pytorch.timing]\nmin_reps = 0\n", "pytorch.timing.min_reps"),
    ],
    ids=["tolerance", "trials", "baseline", "unknown", "timing-unknown", "timing-value"],
)
def test_the_pytorch_section_is_validated_by_its_domain(tmp_path, toml, key):
    """`[pytorch]` is the domain's to validate (domains/pytorch/settings.py): a bad key or value
    there is a ConfigError naming it as the file spells it."""
    ev = load_config(write(tmp_path, toml)).evaluation
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as ei:
        settings(ev)
    assert not isinstance(ei.value, ValidationError)


def test_missing_file_names_the_file(tmp_path):
    p = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert str(p) in str(ei.value)


def test_bad_toml_names_the_file(tmp_path):
    p = write(tmp_path, "[evaluation\ndevice = \n")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert str(p) in str(ei.value)


def test_non_utf8_file_is_config_error(tmp_path):
    p = tmp_path / "latin.toml"
    p.write_bytes(b'[evaluation]\ndevice = "\xff"\n')
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert str(p) in str(ei.value)


def test_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATAGEM_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir(EvaluationConfig()) == tmp_path / "c"


def test_cache_dir_explicit_config_beats_env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATAGEM_CACHE_DIR", str(tmp_path / "env"))
    assert cache_dir(EvaluationConfig(cache_dir=tmp_path / "cfg")) == tmp_path / "cfg"


def test_cache_dir_falls_back_to_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("STRATAGEM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir(EvaluationConfig()) == tmp_path / "xdg" / "stratagem"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir(EvaluationConfig()) == tmp_path / "home" / ".cache" / "stratagem"


def test_cache_dir_expands_user(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("STRATAGEM_CACHE_DIR", "~/cc")
    assert cache_dir(EvaluationConfig()) == tmp_path / "cc"


def test_config_is_frozen():
    ev = load_config().evaluation
    with pytest.raises(ValidationError):
        ev.device = "cpu"  # type: ignore[misc]


# -- keys that moved to [pytorch] (issue 25 item 1) ------------------------------------------


OLD = ('[evaluation]\ndevice = "cpu"\ncorrectness_trials = 7\nbaselines = ["eager"]\nintegrity = "strict"\n'
       'roofline_margin = 0.25\ngpu_memory_fraction = 0.5\n[evaluation.correctness]\nmode = "calibrated"\n'
       '[evaluation.tolerances.float32]\natol = 1e-3\nrtol = 1e-3\n[evaluation.timing]\nbudget_ms = 100\n')


def test_an_old_config_file_keeps_every_moved_setting_and_says_where_it_went(tmp_path):
    p = write(tmp_path, OLD)
    with pytest.warns(FutureWarning) as caught:
        ev = load_config(p).evaluation
    said = {str(w.message): (w.filename, w.lineno) for w in caught}
    lines = OLD.splitlines()
    for key in ("correctness_trials", "baselines", "integrity", "roofline_margin", "gpu_memory_fraction",
                "correctness", "tolerances", "timing"):
        note = f"[evaluation] {key} is deprecated: it is now [pytorch] {key} (applied from there; move it)"
        assert note in said, (key, said)
        path, line = said[note]  # said at the key's own line of the file
        assert path == str(p) and key in lines[line - 1], (key, line)
    pt = settings(ev)
    assert (pt.correctness_trials, pt.baselines, pt.integrity, pt.roofline_margin, pt.gpu_memory_fraction) == (
        7, ["eager"], "strict", 0.25, 0.5)
    assert pt.correctness.mode == "calibrated" and pt.tolerances["float32"].atol == 1e-3
    assert pt.timing.budget_ms == 100 and pt.timing.min_reps == 10  # the timer's settings: [pytorch.timing]
    assert ev.device == "cpu"


def test_a_new_config_file_says_nothing(tmp_path, recwarn):
    p = write(tmp_path, '[evaluation]\ndevice = "cpu"\n[pytorch]\nintegrity = "strict"\n')
    assert settings(load_config(p).evaluation).integrity == "strict"
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]


def test_a_moved_key_at_both_places_differently_is_an_error(tmp_path):
    p = write(tmp_path, '[evaluation]\nintegrity = "lenient"\n[pytorch]\nintegrity = "strict"\n')
    with pytest.raises(ConfigError, match=r"pytorch\.integrity.*\[evaluation\] integrity"), pytest.warns(FutureWarning):
        load_config(p)


def test_overrides_at_the_old_place_win_over_the_file_silently(tmp_path, recwarn):
    """The command line's --integrity and --correctness still write `evaluation.*` (cli/common.py):
    they land in [pytorch] and win over the file's section, with no deprecation message."""
    p = write(tmp_path, '[pytorch]\nintegrity = "lenient"\ncorrectness_trials = 3\n')
    ev = load_config(p, {"evaluation": {"integrity": "strict", "correctness": {"mode": "calibrated"}}}).evaluation
    pt = settings(ev)
    assert (pt.integrity, pt.correctness.mode, pt.correctness_trials) == ("strict", "calibrated", 3)
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]


def test_code_that_sets_a_moved_key_on_evaluation_config_still_works():
    """Construction and `model_copy(update=...)` with an old key (tests and benchmarks written
    before the move) reach [pytorch]; so does a stored run's configuration."""
    from stratagem.config import StratagemConfig

    ev = EvaluationConfig(baselines=["eager", "compile"], device="cpu")
    assert settings(ev).baselines == ["eager", "compile"]
    ev2 = ev.model_copy(update={"correctness_trials": 2, "timeout_s": 9.0})
    assert (settings(ev2).correctness_trials, settings(ev2).baselines, ev2.timeout_s) == (2, ["eager", "compile"], 9.0)
    ev3 = ev2.model_copy(update={"correctness_trials": 4, "timing": settings(ev2).timing.model_copy(update={"pairs": 6})})
    assert (settings(ev3).correctness_trials, settings(ev3).timing.pairs) == (4, 6)  # an update wins over the section
    stored = {"evaluation": {"device": "cpu", "integrity": "strict", "tolerances": {"float32": {"atol": 1, "rtol": 1}}}}
    again = StratagemConfig.model_validate(stored).evaluation
    assert settings(again).integrity == "strict" and settings(again).tolerances["float32"].atol == 1
    dumped = StratagemConfig.model_validate(StratagemConfig.model_validate(stored).model_dump(mode="json"))
    assert settings(dumped.evaluation).integrity == "strict"


def test_with_settings_changes_the_pytorch_section_and_validates():
    from stratagem.domains.pytorch.settings import with_settings

    ev = EvaluationConfig(device="cpu", baselines=["eager"])
    strict = with_settings(ev, integrity="strict", correctness_trials=2)
    assert (settings(strict).integrity, settings(strict).correctness_trials, settings(strict).baselines) == (
        "strict", 2, ["eager"])
    assert settings(ev).integrity == "lenient"  # the original is untouched
    with pytest.raises(ConfigError, match=r"pytorch\.integrity"):
        with_settings(ev, integrity="maybe")


def test_a_section_of_a_domain_without_settings_is_an_error(tmp_path):
    from stratagem.domains import check_sections

    ev = load_config(write(tmp_path, "[command]\nx = 1\n")).evaluation
    with pytest.raises(ConfigError, match=r"command\.x: the command domain has no such setting"):
        check_sections(ev)


def test_a_table_that_is_no_section_names_it_when_checked(tmp_path):
    """A top-level table is a domain's section to the config (it knows no domain); the
    registry says a misspelt one is no section at all, before anything is evaluated."""
    from stratagem.domains import check_sections
    from stratagem.evaluation.api import make_evaluator

    ev = load_config(write(tmp_path, '[serach]\niterations = 3\n[pytorch]\nintegrity = "strict"\n')).evaluation
    assert ev.domains == {"serach": {"iterations": 3}, "pytorch": {"integrity": "strict"}}
    for check in (check_sections, make_evaluator):
        with pytest.raises(ConfigError, match=r"\[serach\]: unknown section.*search.*pytorch"):
            check(ev)
