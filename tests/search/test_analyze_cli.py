"""`stratagem analyze alignment|clusters` on a synthetic run: tables and JSON, the t-SNE plot,
and clear errors for bad options."""

from __future__ import annotations

import json

from fakes import src
from test_report_html import fake_run

from stratagem.cli import main

FAMILIES = [[src(f"a{i}", 0.9 - 0.05 * i), "import triton\n" + src(f"b{i}", 0.5 - 0.02 * i) + f"B_{i} = {i}\n"]
            for i in range(4)]


def test_alignment_and_clusters_as_json_and_tables(tmp_path, capsys):
    run = fake_run(tmp_path / "r", FAMILIES)
    assert main(["analyze", "alignment", str(run), "--xi", "0.1,10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["xis"] == [0.1, 10.0] and len(out["efficiency"]) == 2
    assert all(e["explore_share"] is not None for e in out["efficiency"])  # labels for every xi
    assert out["iterations"] and all(r["intended"] == "explore" for r in out["iterations"])  # innovate plans
    png = tmp_path / "map.png"
    assert main(["analyze", "clusters", str(run), "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sum(len(c["designs"]) for c in out["clusters"]) == 8
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["analyze", "alignment", str(run)]) == 0
    assert "Strategist matches BO" in capsys.readouterr().out


def test_bad_options_are_named(tmp_path, capsys):
    run = fake_run(tmp_path / "r", FAMILIES[:2])
    assert main(["analyze", "alignment", str(run), "--xi", "lots"]) == 2
    assert "--xi" in capsys.readouterr().out
    assert main(["analyze", "clusters", str(run), "--threshold", "2"]) == 2
    assert main(["analyze", "clusters", str(tmp_path / "nope")]) == 2
