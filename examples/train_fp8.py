"""Train a small residual MLP model in FP8 (deep_tile.nn) and in BF16 from the same seed; compare the losses.

    python examples/train_fp8.py                       # 300 steps, prints both loss curves
    python examples/train_fp8.py --steps 500 --png losses.png --json losses.json

The task is synthetic: inputs are random vectors, the targets the outputs of a fixed random
"teacher" network; the student is ``--blocks`` pre-norm residual blocks (RMSNorm, a SwiGLU MLP of
``--hidden`` -> 2 x ``--inter`` -> ``--hidden``) and a bf16 output head, trained with AdamW on the
mean squared error (cosine learning-rate decay to 0, gradient norm clipped at 1: with a constant
rate of 3e-4 both the BF16 and the FP8 runs had loss spikes after ~170 steps). Both students start from the same weights and see the same batches; the FP8 one
runs every block's linear layers as deep_tile.nn.Fp8Linear (DeepSeek-V3's recipe: activations and
gradients 1x128, weights 128x128, weight gradients in FP32 into a main gradient, which is handed to
the optimizer), the BF16 one as torch.nn.Linear. The run passes when the FP8 loss, averaged over
the last tenth of the steps, is within ``--tolerance`` (default 5%) of the BF16 one: FP8's rounding
(e4m3 keeps 3 mantissa bits, a relative step of 1/16 per element, averaged over the 128-element
groups of each dot product) perturbs each step's gradient a little; it should not change where
training goes. Needs an sm_90 GPU; the PNG needs matplotlib (``pip install deep_tile[plot]``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from deep_tile import nn as dnn  # noqa: E402


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim, device="cuda", dtype=torch.bfloat16))

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * self.weight


class Block(torch.nn.Module):
    def __init__(self, hidden: int, inter: int, linear):
        super().__init__()
        self.norm = RMSNorm(hidden)
        self.gate_up, self.down = linear(hidden, 2 * inter), linear(inter, hidden)

    def forward(self, x):
        gate, up = self.gate_up(self.norm(x)).chunk(2, dim=-1)
        return x + self.down(torch.nn.functional.silu(gate) * up)


class Student(torch.nn.Module):
    def __init__(self, hidden: int, inter: int, blocks: int, linear):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(hidden, inter, linear) for _ in range(blocks))
        self.head = torch.nn.Linear(hidden, hidden, bias=False, device="cuda", dtype=torch.bfloat16)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def fp8_linear(i: int, o: int):
    return dnn.Fp8Linear(i, o, device="cuda")


def bf16_linear(i: int, o: int):
    return torch.nn.Linear(i, o, bias=False, device="cuda", dtype=torch.bfloat16)


def train(model, teacher, args, seed: int) -> list:
    """AdamW on the MSE; FP8 layers' main gradients become the parameters' gradients each step."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(args.tokens, args.hidden, generator=gen, device="cuda").to(torch.bfloat16)
        with torch.no_grad():
            target = teacher(x)
        loss = torch.nn.functional.mse_loss(model(x).float(), target.float())
        loss.backward()
        for p in model.parameters():
            main_grad = getattr(p, "main_grad", None)
            if main_grad is not None:
                p.grad = main_grad.to(p.dtype)
                main_grad.zero_()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--inter", type=int, default=2048)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--png", metavar="PATH")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    teacher = torch.nn.Sequential(bf16_linear(args.hidden, 4 * args.hidden), torch.nn.GELU(),
                                  bf16_linear(4 * args.hidden, args.hidden))
    torch.manual_seed(args.seed + 1)
    bf16 = Student(args.hidden, args.inter, args.blocks, bf16_linear)
    torch.manual_seed(args.seed + 1)
    fp8 = Student(args.hidden, args.inter, args.blocks, fp8_linear)
    fp8.load_state_dict(bf16.state_dict())  # the same start, exactly

    curves = {"bf16": train(bf16, teacher, args, args.seed + 2), "fp8": train(fp8, teacher, args, args.seed + 2)}
    tail = max(1, args.steps // 10)
    final = {name: sum(c[-tail:]) / tail for name, c in curves.items()}
    gap = final["fp8"] / final["bf16"] - 1
    for step in range(0, args.steps, max(1, args.steps // 15)):
        print(f"step {step:>5}  bf16 {curves['bf16'][step]:.5f}  fp8 {curves['fp8'][step]:.5f}")
    print(f"first loss {curves['bf16'][0]:.5f}; mean of the last {tail} steps: bf16 {final['bf16']:.5f}, "
          f"fp8 {final['fp8']:.5f} ({100 * gap:+.2f}%, tolerance {100 * args.tolerance:.0f}%)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "curves": curves, "final": final}, indent=1))
    if args.png:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("no PNG: matplotlib is not installed (pip install deep_tile[plot])")
        else:
            fig, ax = plt.subplots(figsize=(6, 3.5))
            for name, curve in curves.items():
                ax.plot(curve, label=name.upper(), linewidth=1)
            ax.set_yscale("log")
            ax.set_xlabel("step")
            ax.set_ylabel("MSE loss")
            ax.set_title(f"{args.blocks} residual SwiGLU blocks, {args.hidden} -> 2x{args.inter}")
            ax.legend()
            fig.tight_layout()
            fig.savefig(args.png, dpi=120)
    ok = abs(gap) <= args.tolerance and all(c == c for c in curves["fp8"])  # and no NaN
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
