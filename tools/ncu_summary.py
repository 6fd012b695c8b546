"""Summarise tools/device_run.sh ncu-cmp outputs side by side (no GPU needed).

    python tools/ncu_summary.py DIR deepgemm auto 128x192_mcB_u6

DIR holds ncu-cmp's ``ncucmp_raw_NAME.csv`` (``ncu --page raw --csv``) and ``ncucmp_sass_NAME.csv``
(``ncu --page source --csv --print-source sass``) for each NAME. Printed: a few key metrics
(duration, cycles, instructions, tensor-pipe activity, L2 and DRAM traffic), the stall samples by
reason, the instruction mix by opcode (executions in millions and stall samples), and the k-loop
body per k-block and math warp: the instructions executed as often as a QGMMA (within 3%), divided
by the k-blocks those QGMMAs make (four WGMMAs of k = 32 per column part of at most 128 columns,
one part for the wider WGMMAs).

Last, each opcode's share of the stall samples of the instructions a warp runs more than once.
The instructions each warp runs at most once (executions <= grid x warps per CTA: the set-up and
the kernel's end) are left out: with 2-CTA clusters the producer warpgroup's idle warps wait at the
final cluster barrier for the whole kernel, and their samples there would crowd the rest.
"""
from __future__ import annotations

import collections
import csv
import sys
from pathlib import Path

METRICS = (
    "gpu__time_duration.sum", "sm__cycles_elapsed.avg", "smsp__cycles_active.avg", "launch__grid_size",
    "smsp__inst_executed.sum", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__issue_active.avg.pct_of_peak_sustained_active", "lts__t_sectors_srcunit_tex_op_read.sum",
    "lts__t_sector_hit_rate.pct", "lts__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", "launch__registers_per_thread",
)


def raw_metrics(path: Path) -> dict:
    """The last kernel's row of ncu's raw CSV page, by metric name."""
    rows = list(csv.reader(path.open()))
    return dict(zip(rows[0], rows[-1]))


def _count(text: str) -> int:
    """A CSV cell as a count (0 for empty or non-numeric cells)."""
    return int(text) if text.isdigit() else 0


def sass_rows(path: Path) -> list:
    """(opcode, executions, stall samples, {reason: samples}) per SASS instruction of ncu's source page."""
    rows = list(csv.reader(path.open()))
    hdr = rows[1]
    col = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    out = []
    for r in rows[2:]:
        words = r[col["Source"]].split() if len(r) >= len(hdr) else []
        if not words:
            continue
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        out.append((op, _count(r[col["Instructions Executed"]]), _count(r[col["Warp Stall Sampling (All Samples)"]]),
                    {h[6:]: _count(r[col[h]]) for h in reasons}))
    return out


def loop_body_per_k_block(rows: list) -> tuple:
    """(opcode -> executions, k-blocks x math warps) over the instructions executed as often as a QGMMA."""
    counts = sorted({e for op, e, _, _ in rows if op.startswith("QGMMA") and e > 0})
    counts = [c for c in counts if c > 0.3 * counts[-1]]
    mix, wgmma_n = collections.Counter(), 0
    for op, e, _, _ in rows:
        if any(abs(e - q) <= 0.03 * q for q in counts):
            mix[op.split(".")[0]] += e
            if op.startswith("QGMMA"):
                wgmma_n = int(op.split(".")[1].split("x")[1])
    per_k_block = 4 * (1 if wgmma_n > 128 else 2)  # column parts of 128: 128x256 /128 has two
    return mix, mix["QGMMA"] / per_k_block


def repeated_shares(rows: list, once: int) -> collections.Counter:
    """Opcode -> share of the stall samples of the instructions executed more than `once` times."""
    samples = collections.Counter()
    for op, e, s, _ in rows:
        if e > once:
            samples[op.split(".")[0] if not op.startswith("WARPGROUP") else ".".join(op.split(".")[:2])] += s
    total = sum(samples.values())
    return collections.Counter({op: v / total for op, v in samples.items()}) if total else samples


def table(title: str, keys, cells) -> None:
    if title:
        print(title)
    for key in keys:
        print(f"  {key:40s}" + "".join(f"{cell(key):>18s}" for cell in cells))


def main(argv: list) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    where, names = Path(argv[0]), argv[1:]
    raw = {n: raw_metrics(where / f"ncucmp_raw_{n}.csv") for n in names}
    sass = {n: sass_rows(where / f"ncucmp_sass_{n}.csv") for n in names}
    print(f"  {'':40s}" + "".join(f"{n:>18s}" for n in names))
    table("metrics:", METRICS, [lambda m, n=n: raw[n].get(m, "-") for n in names])

    stalls = {n: collections.Counter() for n in names}
    mix = {n: collections.Counter() for n in names}
    samples = {n: collections.Counter() for n in names}
    for n in names:
        for op, e, s, reasons in sass[n]:
            stalls[n].update(reasons)
            mix[n][op.split(".")[0]] += e
            samples[n][op.split(".")[0]] += s
    reasons = sorted(set().union(*stalls.values()), key=lambda k: (-stalls[names[0]][k], k))[:16]
    table("stall samples by reason:", reasons, [lambda k, n=n: str(stalls[n][k]) for n in names])
    ops = sorted(set().union(*mix.values()), key=lambda k: (-max(mix[n][k] for n in names), k))[:26]
    table("instructions executed (M) / stall samples:", ops,
          [lambda o, n=n: f"{mix[n][o] / 1e6:.3f} / {samples[n][o]}" for n in names])

    body = {n: loop_body_per_k_block(sass[n]) for n in names}
    ops = sorted(set().union(*[b[0] for b in body.values()]),
                 key=lambda k: (-max(body[n][0][k] / body[n][1] for n in names), k))
    print("k-loop body per k-block and math warp (instructions executed as often as a QGMMA, within 3%):")
    print(f"  {'total':40s}" + "".join(f"{sum(body[n][0].values()) / body[n][1]:>18.1f}" for n in names))
    table("", ops[:28], [lambda o, n=n: f"{body[n][0][o] / body[n][1]:.2f}" for n in names])

    once = {n: _count(raw[n].get("launch__grid_size", "")) * (_count(raw[n].get("launch__block_size", "")) // 32)
            for n in names}
    shares = {n: repeated_shares(sass[n], once[n]) for n in names}
    ops = sorted(set().union(*shares.values()), key=lambda k: (-max(shares[n][k] for n in names), k))[:14]
    table("stall sample shares, instructions a warp runs more than once (%):", ops,
          [lambda o, n=n: f"{100 * shares[n][o]:.1f}" for n in names])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
