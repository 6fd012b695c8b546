"""The README's performance summary and plots, from the benchmarks' JSON in benchmarks/data/.

    python benchmarks/plot_results.py                   # print the summary tables (markdown)
    python benchmarks/plot_results.py --plots docs/img  # ... and write the PNGs there

Reads the newest run of each benchmark per chip (the files named in ``SOURCES``; each file's own
``env`` / ``environment`` record gives its date, GPU, driver and compiler) and computes every
number from the timings in them: ratios are deep_tile's speedup (the other library's time over
deep_tile's; > 1: deep_tile faster), summarised as geometric means.

- ``dense``: ``bench_fp8_gemm.py`` (18 DeepSeek-V3 shapes + 8192^3, M = 64 .. 8192) beside
  DeepGEMM latest and cuBLAS blockwise;
- ``decode``: ``bench_decode.py`` (a DeepSeek-V3 layer's six dense GEMMs chained in one CUDA graph,
  M = 1, 16, 64, 128): the chain's share of the HBM copy rate measured in the same run, per library,
  and each GEMM alone (its kernels' device time) beside DeepGEMM latest;
- ``grouped`` / ``masked``: ``bench_grouped.py`` (MoE GEMMs: contiguous, offsets, masked) beside
  DeepGEMM latest.

The tables need only the standard library; the plots need matplotlib (``pip install
"deep_tile[plot]"``).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
CHIPS = ("H100", "H200")
SOURCES = {
    "H100": {"dense": "bench_default_h100_2026-11-27b.json",
             "decode": "decode_h100_s26_2026-11-24.json",
             "grouped": "grouped_h100_s16_2026-11-23.json",
             "masked": "grouped_masked_h100_s17_2026-11-24.json"},
    "H200": {"dense": "bench_h200_dglatest_s15_2026-11-23.json",
             "decode": "decode_h200_s26_2026-11-24.json",
             "grouped": "grouped_h200_s16_2026-11-23.json",
             "masked": "grouped_h200_s16_masked_final_2026-11-23.json"},
}
"""The newest run of each benchmark per chip (benchmarks/RESULTS.md cites each of them)."""
PLOTS = ("dense.png", "moe.png", "decode_chain.png")
"""The PNGs ``write_plots`` makes."""
PLOT_HINT = 'the plots need matplotlib: pip install "deep_tile[plot]" (or pip install matplotlib)'


def geomean(values: list[float]) -> float:
    """Geometric mean of positive numbers (ValueError on an empty list or a value <= 0)."""
    if not values or min(values) <= 0:
        raise ValueError(f"geomean needs positive values; got {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def load(chip: str, kind: str, data: Path = DATA) -> dict:
    """One benchmark's JSON for ``chip``; ``"_file"`` added (its name)."""
    path = Path(data) / SOURCES[chip][kind]
    record = json.loads(path.read_text())
    record["_file"] = path.name
    return record


def setup(record: dict) -> dict:
    """Date, GPU, driver, compiler, torch and DeepGEMM version of a run."""
    env = record.get("env") or record["environment"]
    return {key: env.get(key, "?") for key in ("date", "gpu", "driver", "compiler", "torch", "deepgemm")}


def dense_ratios(record: dict) -> list[dict]:
    """Per shape of a ``bench_fp8_gemm.py`` run: m, n, k, deep_tile us, and its speedup over
    DeepGEMM (``dg``) and cuBLAS blockwise (``bw``; None where not timed). Failed rows raise."""
    rows = []
    for row in record["rows"]:
        if row["status"] != "ok":
            raise ValueError(f"{record['_file']}: {row['m']}x{row['n']}x{row['k']} is {row['status']}")
        us = row["deep_tile"]["us"]
        ratio = {lib: (row[key]["us"] / us if row.get(key) and row[key].get("us") else None)
                 for lib, key in (("dg", "deepgemm"), ("bw", "cublas_bw"))}
        rows.append({"m": row["m"], "n": row["n"], "k": row["k"], "us": us, **ratio})
    return rows


def decode_gemm_ratios(record: dict) -> list[dict]:
    """Each dense GEMM of a ``bench_decode.py`` run alone: m, shape ``NxK``, speedup over DeepGEMM
    (``dg``) and cuBLAS blockwise (``bw``, None where not timed: M % 4 != 0). The routed experts'
    masked GEMMs are left out (``grouped_ratios`` has the MoE kinds)."""
    rows = []
    for rec in record["records"]:
        for name, gemm in rec["gemms"].items():
            if name.startswith("experts") or "deep_tile" not in gemm:
                continue
            us = gemm["deep_tile"]["us"]
            rows.append({"m": rec["m"], "shape": name,
                         "dg": gemm["deepgemm"]["us"] / us if "deepgemm" in gemm else None,
                         "bw": gemm["cublas"]["us"] / us if "cublas" in gemm else None})
    return rows


def chain_share(record: dict) -> dict[int, dict[str, float]]:
    """The dense decode chain per M: each library's % of the HBM copy rate measured in the run."""
    return {rec["m"]: {lib: value["pct_copy"] for lib, value in rec["chains"]["dense"].items()
                       if isinstance(value, dict) and "pct_copy" in value}
            for rec in record["records"]}


def grouped_ratios(record: dict, kind: str) -> list[float]:
    """deep_tile's speedup over DeepGEMM per shape of one MoE kind of a ``bench_grouped.py`` run
    (offsets: over DeepGEMM's contiguous GEMM on the padded rows, as the benchmark times it)."""
    ratios = []
    for row in record["rows"]:
        if row["kind"] != kind:
            continue
        if row["status"] != "ok":
            raise ValueError(f"{record['_file']}: a {kind} row is {row['status']}")
        ratios.append(row["deepgemm"]["us"] / row["deep_tile"]["us"])
    return ratios


def summary(data: Path = DATA) -> dict:
    """Every figure of the README's performance table, per chip, with the files and setups."""
    out = {}
    for chip in CHIPS:
        dense, decode = load(chip, "dense", data), load(chip, "decode", data)
        grouped, masked = load(chip, "grouped", data), load(chip, "masked", data)
        rows = dense_ratios(dense)
        alone = decode_gemm_ratios(decode)
        share = chain_share(decode)

        def gm(selected, lib):
            return geomean([r[lib] for r in selected if r[lib] is not None])

        out[chip] = {
            "files": {kind: rec["_file"] for kind, rec in
                      (("dense", dense), ("decode", decode), ("grouped", grouped), ("masked", masked))},
            "setup": {kind: setup(rec) for kind, rec in
                      (("dense", dense), ("decode", decode), ("grouped", grouped), ("masked", masked))},
            "dense_dg": gm(rows, "dg"), "dense_bw": gm(rows, "bw"), "dense_shapes": len(rows),
            "dense_small_dg": gm([r for r in rows if r["m"] <= 128], "dg"),
            "dense_small_bw": gm([r for r in rows if r["m"] <= 128], "bw"),
            "dense_large_dg": gm([r for r in rows if r["m"] >= 1024], "dg"),
            "dense_large_bw": gm([r for r in rows if r["m"] >= 1024], "bw"),
            "decode_alone_dg": gm(alone, "dg"), "decode_alone_bw": gm(alone, "bw"),
            "decode_alone_shapes": len(alone),
            "contiguous": geomean(grouped_ratios(grouped, "contiguous")),
            "offsets": geomean(grouped_ratios(grouped, "offsets")),
            "masked": geomean(grouped_ratios(masked, "masked")),
            "moe_counts": {kind: len(grouped_ratios(masked if kind == "masked" else grouped, kind))
                           for kind in ("contiguous", "offsets", "masked")},
            "chain": share,
            "copy_rate_tbps": decode["copy_rate"] / 1e12,
        }
    return out


def markdown(result: dict) -> str:
    """The summary as the README prints it: one table, a column per chip, then the sources."""
    def row(label, fmt):
        return "| " + label + " | " + " | ".join(fmt(result[chip]) for chip in CHIPS) + " |"

    def pct(chip, lib):
        return " / ".join(f"{chip['chain'][m][lib]:.0f}" for m in sorted(chip["chain"]))

    ms = " / ".join(str(m) for m in sorted(result[CHIPS[0]]["chain"]))
    lines = [
        "| Speedup: geomean of the other library's time over deep_tile's (> 1: deep_tile faster) | "
        + " | ".join(CHIPS) + " |",
        "|---|" + "---|" * len(CHIPS),
        row(f"Dense, {result[CHIPS[0]]['dense_shapes']} shapes (M = 64-8192), over DeepGEMM latest / cuBLAS blockwise",
            lambda c: f"{c['dense_dg']:.3f} / {c['dense_bw']:.3f}"),
        row("... of which M = 64 and 128", lambda c: f"{c['dense_small_dg']:.3f} / {c['dense_small_bw']:.3f}"),
        row("... of which M = 4096 and 8192", lambda c: f"{c['dense_large_dg']:.3f} / {c['dense_large_bw']:.3f}"),
        row(f"Dense decode GEMMs alone, M = 1-128 ({result[CHIPS[0]]['decode_alone_shapes']} shapes; "
            "cuBLAS: M >= 16), over DeepGEMM latest / cuBLAS blockwise",
            lambda c: f"{c['decode_alone_dg']:.3f} / {c['decode_alone_bw']:.3f}"),
        row(f"MoE contiguous ({result[CHIPS[0]]['moe_counts']['contiguous']} shapes) over DeepGEMM latest",
            lambda c: f"{c['contiguous']:.3f}"),
        row(f"MoE masked ({result[CHIPS[0]]['moe_counts']['masked']} shapes) over DeepGEMM latest",
            lambda c: f"{c['masked']:.3f}"),
        row(f"MoE offsets ({result[CHIPS[0]]['moe_counts']['offsets']} shapes) over DeepGEMM on padded rows",
            lambda c: f"{c['offsets']:.3f}"),
        row(f"**Decode chain** (six dense GEMMs, one CUDA graph), M = {ms}: % of the HBM copy rate, deep_tile",
            lambda c: pct(c, "deep_tile")),
        row("... DeepGEMM latest with PDL", lambda c: pct(c, "deepgemm_pdl")),
        row("HBM copy rate in that run", lambda c: f"{c['copy_rate_tbps']:.2f} TB/s"),
    ]
    lines.append("")
    for chip in CHIPS:
        for kind, name in result[chip]["files"].items():
            s = result[chip]["setup"][kind]
            lines.append(f"- {chip} {kind}: `data/{name}` ({s['date']}, {s['gpu']}, driver {s['driver']}, "
                         f"{s['compiler']}, torch {s['torch']}, DeepGEMM {s['deepgemm']})")
    return "\n".join(lines)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(f"plot_results.py: {PLOT_HINT}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _shape_label(row: dict) -> str:
    return f"{row['m']}x{row['n']}x{row['k']}"


def write_plots(out_dir: Path, data: Path = DATA) -> list[Path]:
    """Write the PNGs of ``PLOTS`` into ``out_dir``; returns their paths."""
    plt = _pyplot()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    colors = {"dg": "#1f77b4", "bw": "#ff7f0e", "deep_tile": "#2ca02c", "deep_tile_nopdl": "#98df8a",
              "deepgemm_pdl": "#1f77b4", "cublas": "#ff7f0e"}
    style = {"font.size": 8, "axes.titlesize": 9, "legend.fontsize": 7, "axes.grid": True,
             "grid.alpha": 0.3, "savefig.dpi": 100}
    paths = []
    with plt.rc_context(style):
        # 1. Dense: speedup per shape, both chips.
        fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), sharey=True)
        for ax, chip in zip(axes, CHIPS):
            record = load(chip, "dense", data)
            ax.set_yscale("log")
            rows = sorted(dense_ratios(record), key=lambda r: (r["m"], r["n"], r["k"]))
            x = range(len(rows))
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.plot(x, [r["bw"] for r in rows], "^", color=colors["bw"], label="vs cuBLAS blockwise")
            ax.plot(x, [r["dg"] for r in rows], "o", color=colors["dg"], label="vs DeepGEMM latest")
            for boundary in [i for i in range(1, len(rows)) if rows[i]["m"] != rows[i - 1]["m"]]:
                ax.axvline(boundary - 0.5, color="grey", linewidth=0.5, linestyle=":")
            ax.set_xticks(list(x))
            ax.set_xticklabels([_shape_label(r) for r in rows], rotation=90, fontsize=6.5)
            ax.set_title(f"{chip}: dense FP8 GEMM, M x N x K ({setup(record)['date'][:10]})")
        ticks = [0.9, 1.0, 1.1, 1.2, 1.4, 1.6, 2.0]
        axes[0].set_yticks(ticks, [f"{t:.1f}" for t in ticks])
        axes[0].minorticks_off()
        axes[1].minorticks_off()
        axes[0].set_ylabel("deep_tile speedup (> 1: faster)")
        axes[0].legend(loc="upper right")
        fig.tight_layout()
        paths.append(_save(fig, out_dir / PLOTS[0], plt))

        # 2. MoE: per-shape speedup over DeepGEMM per kind and chip, geomean marked.
        fig, ax = plt.subplots(figsize=(6.0, 3.0))
        ax.axhline(1.0, color="black", linewidth=0.8)
        labels, position = [], 0
        for kind in ("contiguous", "masked", "offsets"):
            for chip in CHIPS:
                record = load(chip, "masked" if kind == "masked" else "grouped", data)
                ratios = grouped_ratios(record, kind)
                jitter = [position + 0.25 * ((i % 7) - 3) / 3 for i in range(len(ratios))]
                ax.plot(jitter, ratios, ".", color=colors["dg"] if chip == "H100" else "#d62728", alpha=0.6)
                ax.plot([position - 0.35, position + 0.35], [geomean(ratios)] * 2, color="black", linewidth=2)
                labels.append(f"{kind}\n{chip} ({len(ratios)})")
                position += 1
        ax.set_xticks(range(position))
        ax.set_xticklabels(labels)
        ax.set_ylabel("speedup over DeepGEMM latest")
        ax.set_title("MoE grouped GEMMs, one dot per shape, bar: geomean\n"
                     "(offsets: against DeepGEMM's contiguous GEMM on the padded rows)")
        fig.tight_layout()
        paths.append(_save(fig, out_dir / PLOTS[1], plt))

        # 3. Decode chain: % of the HBM copy rate per M, per library.
        fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.1), sharey=True)
        names = {"deep_tile": "deep_tile", "deep_tile_nopdl": "deep_tile, PDL off",
                 "deepgemm_pdl": "DeepGEMM latest, PDL", "cublas": "cuBLAS blockwise"}
        for ax, chip in zip(axes, CHIPS):
            record = load(chip, "decode", data)
            share = chain_share(record)
            ms = sorted(share)
            for lib, label in names.items():
                points = [(i, share[m][lib]) for i, m in enumerate(ms) if lib in share[m]]
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=colors[lib], label=label,
                        linestyle="--" if lib == "deep_tile_nopdl" else "-")
            ax.set_xticks(range(len(ms)))
            ax.set_xticklabels([str(m) for m in ms])
            ax.set_xlabel("M (tokens)")
            ax.set_ylim(40, 100)
            ax.set_title(f"{chip} ({setup(record)['date'][:10]}): six dense GEMMs of a layer\n"
                         f"in one CUDA graph; copy rate {record['copy_rate'] / 1e12:.2f} TB/s")
        axes[0].set_ylabel("% of the HBM copy rate")
        axes[0].legend(loc="lower left")
        fig.tight_layout()
        paths.append(_save(fig, out_dir / PLOTS[2], plt))
    return paths


def _save(fig, path: Path, plt) -> Path:
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="folder of the JSON (default: benchmarks/data)")
    parser.add_argument("--plots", type=Path, metavar="DIR", help="also write the PNGs into DIR (e.g. docs/img)")
    args = parser.parse_args(argv)
    print(markdown(summary(args.data)))
    if args.plots:
        for path in write_plots(args.plots, args.data):
            print(f"wrote {path} ({path.stat().st_size // 1024} KB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
