"""Random FP8 expert weights of a Mixture-of-Experts layer, with their 128x128 block scales."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from deep_tile.common import SCALE_GROUP, ceil_div
from deep_tile.casts.quant import per_block_cast_to_fp8

__all__ = ["MoEWeights", "quantize_expert_weights", "make_expert_weights", "make_moe_weights"]


@dataclass(frozen=True)
class MoEWeights:
    """FP8 expert weights with their 128x128 block scales (float32).

    ``w13 [E, 2I, H]``: rows ``[0, I)`` gate (W1), rows ``[I, 2I)`` up (W3);
    ``w13_scale [E, ceil(2I/128), ceil(H/128)]``; ``w2 [E, H, I]``; ``w2_scale [E, ceil(H/128), ceil(I/128)]``.
    """

    w13: torch.Tensor
    w13_scale: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor

    @property
    def num_experts(self) -> int:
        """E."""
        return self.w13.shape[0]

    @property
    def hidden(self) -> int:
        """H."""
        return self.w13.shape[2]

    @property
    def intermediate(self) -> int:
        """I (half the rows of w13)."""
        return self.w2.shape[2]


def quantize_expert_weights(w: torch.Tensor):
    """Per-expert ``per_block_cast_to_fp8`` of ``w [E, N, K]``: returns ``(q [E, N, K] float8_e4m3fn,
    s [E, ceil(N/128), ceil(K/128)] float32)``, both contiguous, on ``w``'s device."""
    if not isinstance(w, torch.Tensor) or w.dim() != 3:
        raise ValueError(f"quantize_expert_weights: w must be a 3-D tensor [E, N, K]; "
                         f"got {getattr(w, 'shape', type(w).__name__)}.")
    num_experts, n, k = w.shape
    q, s = _empty_expert_weights(num_experts, n, k, w.device)
    for e in range(num_experts):
        _store_expert(q, s, e, w[e])
    return q, s


def _empty_expert_weights(num_experts, n, k, device):
    q = torch.empty((num_experts, n, k), dtype=torch.float8_e4m3fn, device=device)
    s = torch.empty((num_experts, ceil_div(n, SCALE_GROUP), ceil_div(k, SCALE_GROUP)), dtype=torch.float32,
                    device=device)
    return q, s


def _store_expert(q, s, e, w):
    """``q[e], s[e] = per_block_cast_to_fp8(w)``."""
    q_e, s_e = per_block_cast_to_fp8(w)
    q[e].view(torch.uint8).copy_(q_e.view(torch.uint8))
    s[e].copy_(s_e)


def make_expert_weights(num_experts: int, n: int, k: int, device, generator: Optional[torch.Generator] = None):
    """Random FP8 weights of ``num_experts`` experts: per expert ``randn(n, k) / sqrt(k)`` in bfloat16
    (one expert at a time, so the float staging stays ``n * k``) cast with ``per_block_cast_to_fp8``.

    Returns ``(q [E, n, k] float8_e4m3fn, s [E, ceil(n/128), ceil(k/128)] float32)`` on ``device``;
    ``generator`` (on ``device``) makes it reproducible.
    """
    for name, value in (("num_experts", num_experts), ("n", n), ("k", k)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"make_expert_weights: {name} must be a positive int; got {value!r}.")
    q, s = _empty_expert_weights(num_experts, n, k, device)
    for e in range(num_experts):
        _store_expert(q, s, e, (torch.randn((n, k), generator=generator, device=device) * k ** -0.5).to(torch.bfloat16))
    return q, s


def make_moe_weights(num_experts: int, hidden: int, intermediate: int, device, seed: int = 0) -> MoEWeights:
    """Random expert weights of a layer (:func:`make_expert_weights` for w13 ``[E, 2I, H]`` then w2
    ``[E, H, I]``, from one ``torch.Generator`` on ``device`` seeded with ``seed``).

    Args:
        num_experts, hidden, intermediate: E, H, I (H and I multiples of 128 for the kernels).
        device: where the weights live.
        seed: the generator's seed.

    Returns:
        :class:`MoEWeights`.
    """
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    w13, w13_scale = make_expert_weights(num_experts, 2 * intermediate, hidden, device, gen)
    w2, w2_scale = make_expert_weights(num_experts, hidden, intermediate, device, gen)
    return MoEWeights(w13, w13_scale, w2, w2_scale)
