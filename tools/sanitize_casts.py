"""The fused cast kernels (deep_tile/casts/cast_transpose.py) on small ragged problems, in one process,
for compute-sanitizer (tools/sanitize.sh runs it under each tool):
    SANITIZE_SCRIPTS=tools/sanitize_casts.py bash tools/sanitize.sh
(run from the repository root; uses tests/gpu_cast_cases.py). The last cases have more 128x128
tiles (272) than the pipelined kernels' persistent grid has CTAs on an H100/H200 (2 per SM, 264),
so each CTA reuses its shared-memory buffers (racecheck, synccheck); they run for each design
(deep_tile.kernels.cast_transpose.DESIGNS); then stacks of weights cast in one launch, the last
ones (5 x 9 x 7 = 315 tiles) for each design; then grouped activation casts, the last ones
((9 + 5) bands x 32 column blocks = 448 tiles) for each design. Then the experts layer's SwiGLU kernels (tests/gpu_nn_cases.py).
Exits 1 when a case fails its check."""
import json
import sys

sys.path.insert(0, "tests")
import gpu_cast_cases as cases  # noqa: E402

sys.path.insert(0, ".")
from deep_tile.kernels.cast_transpose import DESIGNS  # noqa: E402

runs = [
    dict(kind="token", rows=1, cols=128, transpose=True, power_of_two=False, special=False, seed=0),
    dict(kind="token", rows=129, cols=272, transpose=True, power_of_two=True, special=True, seed=1),
    dict(kind="token", rows=300, cols=2048, transpose=True, power_of_two=False, special=False, seed=2),
    dict(kind="token", rows=131, cols=144, transpose=False, power_of_two=False, special=False, seed=3),
    dict(kind="block", rows=144, cols=272, transpose=True, power_of_two=False, special=True, seed=4),
    dict(kind="block", rows=256, cols=400, transpose=True, power_of_two=True, special=False, seed=5),
    dict(kind="block", rows=129, cols=16, transpose=False, power_of_two=False, special=False, seed=6),
]
for i, design in enumerate(DESIGNS):
    runs += [dict(kind="token", rows=2100, cols=2048, transpose=True, power_of_two=False, special=True, seed=7 + 2 * i,
                  design=design),
             dict(kind="block", rows=2064, cols=2048, transpose=True, power_of_two=True, special=False, seed=8 + 2 * i,
                  design=design)]
# Weight stacks in one launch (the experts' weights): ragged matrices, and (pipelined designs) a
# stack of more tiles than the persistent grid has CTAs.
stacks = [dict(experts=3, rows=144, cols=272, power_of_two=False, seed=20)]
stacks += [dict(experts=5, rows=1040, cols=784, power_of_two=True, seed=21 + i, design=design)
           for i, design in enumerate(DESIGNS)]
bad = 0
for kwargs in runs:
    r = cases.cast_case(**kwargs)
    bad += not r["ok"]
    print(r["case"], "ok" if r["ok"] else "BAD " + json.dumps(r))
for kwargs in stacks:
    r = cases.stack_case(**kwargs)
    bad += not r["ok"]
    runs.append(r)
    print(r["case"], "ok" if r["ok"] else "BAD " + json.dumps(r))
# The grouped activation cast (the experts' tokens in their own bands): empty and partial groups,
# rows outside every group; then, per design, more bands than the persistent grid has CTAs.
grouped = [dict(rows=300, cols=272, offsets=[5, 5, 133, 260, 261], power_of_two=False, seed=30)]
grouped += [dict(rows=1100, cols=4096, offsets=[0, 1, 129, 257, 640, 1100], power_of_two=True, seed=31 + i,
                 design=design) for i, design in enumerate(DESIGNS)]
for kwargs in grouped:
    r = cases.grouped_case(**kwargs)
    bad += not r["ok"]
    runs.append(r)
    print(r["case"], "ok" if r["ok"] else "BAD " + json.dumps(r))
# The experts layer's SwiGLU kernels (deep_tile/casts/swiglu.py), ragged row counts.
import gpu_nn_cases  # noqa: E402

for rows, inter in ((1, 8), (37, 136), (300, 2048)):
    r = gpu_nn_cases.swiglu(rows, inter)
    bad += not r["ok"]
    runs.append(r)
    print(r["case"], "ok" if r["ok"] else "BAD " + json.dumps(r))
print(f"cast sanitize cases: {len(runs)}, bad: {bad}")
sys.exit(1 if bad else 0)
