"""benchmarks/plot_results.py on the committed JSON: the summary it computes from the timings, and
the PNGs it writes (skipped without matplotlib, which only the `plot` extra installs)."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import plot_results  # noqa: E402


def test_every_source_file_is_committed():
    for chip, files in plot_results.SOURCES.items():
        for kind, name in files.items():
            assert (plot_results.DATA / name).is_file(), f"{chip} {kind}: benchmarks/data/{name} is missing"


def test_the_summary_is_computed_from_the_timings():
    result = plot_results.summary()
    assert set(result) == set(plot_results.CHIPS)
    for chip, figures in result.items():
        dense = plot_results.load(chip, "dense")
        rows = plot_results.dense_ratios(dense)
        # recomputed here from the raw rows: DeepGEMM's time over deep_tile's, geometric mean
        ratios = [row["deepgemm"]["us"] / row["deep_tile"]["us"] for row in dense["rows"]]
        assert figures["dense_dg"] == pytest.approx(math.exp(sum(map(math.log, ratios)) / len(ratios)))
        assert figures["dense_shapes"] == len(rows) == 19
        assert 0.8 < figures["dense_dg"] < 1.5 and 0.8 < figures["dense_bw"] < 2.0
        assert min(figures["dense_small_dg"], figures["dense_large_dg"]) <= figures["dense_dg"] \
            <= max(figures["dense_small_dg"], figures["dense_large_dg"])
        assert figures["moe_counts"] == {"contiguous": 18, "offsets": 6, "masked": 24}
        assert sorted(figures["chain"]) == [1, 16, 64, 128]
        for m, share in figures["chain"].items():
            assert 0 < share["deep_tile"] < 100 and "deepgemm_pdl" in share, (chip, m)
        assert figures["setup"]["dense"]["gpu"].startswith(f"NVIDIA {chip}")


def test_the_markdown_names_each_file_and_its_setup():
    text = plot_results.markdown(plot_results.summary())
    for files in plot_results.SOURCES.values():
        for name in files.values():
            assert f"`data/{name}`" in text
    assert "driver 580" in text and "nvrtc 13.0" in text


def test_the_readme_table_is_the_scripts():
    """README's performance table is what the script computes from the committed JSON (regenerate
    it with `python benchmarks/plot_results.py` when a newer run replaces a file of SOURCES)."""
    table = [line for line in plot_results.markdown(plot_results.summary()).splitlines() if line.startswith("|")]
    readme = (ROOT / "README.md").read_text()
    performance = readme.split("\n## Performance\n")[1].split("\n## ")[0]
    assert [line for line in performance.splitlines() if line.startswith("|")] == table
    for name in plot_results.PLOTS:
        assert f"(docs/img/{name})" in performance, name


def test_geomean_refuses_what_it_cannot_average():
    assert plot_results.geomean([1.0, 4.0]) == pytest.approx(2.0)
    for bad in ([], [1.0, 0.0], [-1.0]):
        with pytest.raises(ValueError):
            plot_results.geomean(bad)


def test_a_failed_row_is_not_averaged():
    record = plot_results.load("H100", "dense")
    record["rows"][3]["status"] = "FAIL"
    with pytest.raises(ValueError, match="FAIL"):
        plot_results.dense_ratios(record)


def test_the_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plot_results.py"), "--plots", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "| Speedup: geomean" in run.stdout
    for name in plot_results.PLOTS:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and 10_000 < len(data) < 100_000, (name, len(data))


def test_the_committed_plots_are_small_pngs():
    for name in plot_results.PLOTS:
        data = (ROOT / "docs" / "img" / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) < 100_000, (name, len(data))


def test_without_matplotlib_the_plots_say_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(SystemExit, match=r"deep_tile\[plot\]"):
        plot_results.write_plots(tmp_path)
    assert not list(tmp_path.iterdir())
