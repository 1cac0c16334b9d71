"""Taking a design away: `stratagem export`, the provenance header, and loading the
reference's weights into a design whose layout differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_cli_search import fake_run

from stratagem.cli import main
from stratagem.core.search import DesignView
from stratagem.search.export import exported_source

REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(torch.relu(self.lin(x)))
'''

WRAPPER = REFERENCE + '''

class ModelNew(nn.Module):
    """As the recipes policy writes them: the reference held as self.model."""

    def __init__(self, dim):
        super().__init__()
        self.model = Model(dim)

    def forward(self, x):
        with torch.inference_mode():
            return self.model(x)
'''

RENAMED = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """Its own parameter names, in the reference's order."""

    def __init__(self, dim):
        super().__init__()
        self.w = nn.Parameter(torch.empty(dim, dim))
        self.b = nn.Parameter(torch.empty(dim))
        self.g = nn.Parameter(torch.ones(dim))
        self.h = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(torch.relu(F.linear(x, self.w, self.b)), (x.shape[-1],), self.g, self.h)
'''


def _view(source: str) -> DesignView:
    return DesignView(id="d" * 64, source=source, status="valid", iteration=2, author="recipe:inference_mode",
                      strategy="recipes", runtime_ms=0.5, speedup=1.5, speedup_low=1.4, speedup_high=1.6,
                      speedup_compared=0.9, compared_low=0.85, compared_high=0.95)


@pytest.mark.parametrize("source", [WRAPPER, RENAMED], ids=["wrapper", "renamed"])
def test_an_exported_design_loads_the_references_trained_weights(source: str, tmp_path: Path) -> None:
    text = exported_source(_view(source), "linear_norm", tmp_path / "run", "NVIDIA H200", {"eager": 0.75}, "pytorch", "candidate.py")
    assert text.startswith("# stratagem ") and "linear_norm" in text.splitlines()[0]
    assert "1.50x [1.40, 1.60]" in text and "NVIDIA H200" in text
    # the ratio against torch.compile with its interval, marked as chained, and said in words
    assert "# slower than torch.compile: 0.90x [0.85, 0.95], chained via eager" in text
    ref_ns: dict = {}
    exec(REFERENCE, ref_ns)  # noqa: S102 - the test's own source
    ns: dict = {}
    exec(text, ns)  # noqa: S102 - the exported file, as a user would import it
    torch.manual_seed(0)
    trained = ref_ns["Model"](16)
    with torch.no_grad():
        for p in trained.parameters():  # "trained": anything but the initial values
            p.copy_(torch.randn_like(p))
    design = ns["ModelNew"](16)
    with pytest.raises(RuntimeError):  # the plain route fails whenever the keys differ
        design.load_state_dict(trained.state_dict())
    placed = ns["load_reference_state_dict"](design, trained.state_dict())
    assert set(placed) == set(trained.state_dict())
    x = torch.randn(4, 16)
    torch.testing.assert_close(design(x), trained(x))


def test_export_command_writes_the_best_or_a_named_design(tmp_path: Path, capsys) -> None:
    fake_run(tmp_path / "r")
    assert main(["show", str(tmp_path / "r"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    best, other = out["best"]["id"], next(d["id"] for d in out["all_designs"] if d["id"] != out["best"]["id"])
    saved = (tmp_path / "r" / "best" / "candidate.py").read_text()  # the run's own copy has the header too
    assert saved.startswith("# stratagem ") and best in saved.splitlines()[0] and "def load_reference_state_dict" in saved
    assert main(["export", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# stratagem ") and best in text.splitlines()[0]
    assert main(["export", str(tmp_path / "r"), other[:8], "--out", str(tmp_path / "x.py")]) == 0
    assert other in (tmp_path / "x.py").read_text().splitlines()[0]
    assert main(["export", str(tmp_path / "r"), "zzzz"]) == 1
    assert "no design" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nowhere")]) == 2
