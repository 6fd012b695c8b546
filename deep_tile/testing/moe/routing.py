"""The router of a Mixture-of-Experts layer: expert ids and weights per token, and per-expert counts,
all computed on the device (no host sync)."""
from __future__ import annotations

from typing import Optional

import torch

__all__ = ["SCORINGS", "route", "check_expert_ids", "expert_counts"]

SCORINGS = ("sigmoid", "softmax")
"""Router score functions: ``sigmoid`` (DeepSeek-V3) and ``softmax`` (DeepSeek-V2, Mixtral)."""


def route(logits: torch.Tensor, top_k: int, scoring: str = "sigmoid", *, correction_bias: Optional[torch.Tensor] = None,
          num_groups: int = 1, topk_groups: int = 1, renormalize: bool = True, scaling_factor: float = 1.0):
    """Router: expert ids and weights per token, all on the device (no host sync).

    DeepSeek-V3 (``scoring="sigmoid"``): ``scores = sigmoid(logits)``; the choice uses ``scores +
    correction_bias`` (bias for selection only); with ``num_groups > 1`` the experts form that many
    equal groups, each group is scored by the sum of its two best choice scores, and only the best
    ``topk_groups`` groups stay eligible; the ``top_k`` best eligible experts are taken; their weights
    are the unbiased ``scores``, divided by their sum when ``renormalize``, then times
    ``scaling_factor`` (2.5 in DeepSeek-V3). ``scoring="softmax"``: ``scores = softmax(logits)`` in
    float32, the same selection (no bias allowed) and weights.

    Args:
        logits: [T, E] floating tensor.
        top_k: experts per token, 1 <= top_k <= E.
        scoring: one of :data:`SCORINGS`.
        correction_bias: optional [E] selection bias (sigmoid scoring only).
        num_groups, topk_groups: group-limited routing (E divisible by num_groups, topk_groups groups
            kept, holding at least top_k experts).
        renormalize, scaling_factor: as above.

    Returns:
        ``(topk_ids, topk_weights)``: int32 [T, top_k] (distinct per token) and float32 [T, top_k].

    Raises:
        ValueError: bad rank, scoring, top_k or group settings.
    """
    fn = "route"
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(f"{fn}: logits must be a 2-D floating tensor [T, E]; got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}.")
    num_tokens, num_experts = logits.shape
    if scoring not in SCORINGS:
        raise ValueError(f"{fn}: scoring must be one of {SCORINGS}; got {scoring!r}.")
    if not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
        raise ValueError(f"{fn}: top_k must be an int in [1, E={num_experts}]; got {top_k!r}.")
    if num_groups < 1 or num_experts % num_groups or not 1 <= topk_groups <= num_groups \
            or topk_groups * (num_experts // num_groups) < top_k:
        raise ValueError(f"{fn}: need E={num_experts} divisible by num_groups and 1 <= topk_groups <= num_groups "
                         f"with topk_groups * E / num_groups >= top_k={top_k}; got num_groups={num_groups}, "
                         f"topk_groups={topk_groups}.")
    if correction_bias is not None and scoring != "sigmoid":
        raise ValueError(f"{fn}: correction_bias is for sigmoid scoring (DeepSeek-V3) only.")
    logits = logits.float()
    scores = torch.sigmoid(logits) if scoring == "sigmoid" else torch.softmax(logits, dim=-1)
    choice = scores if correction_bias is None else scores + correction_bias.float().unsqueeze(0)
    if num_groups > 1:
        per_group = num_experts // num_groups
        grouped = choice.view(num_tokens, num_groups, per_group)
        group_scores = grouped.topk(min(2, per_group), dim=-1).values.sum(dim=-1)            # [T, groups]
        keep = torch.zeros_like(group_scores, dtype=torch.bool)
        keep.scatter_(1, group_scores.topk(topk_groups, dim=-1).indices, True)
        choice = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(num_tokens, num_experts)
    topk_ids = choice.topk(top_k, dim=-1).indices                                              # [T, k] int64
    weights = scores.gather(1, topk_ids)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return topk_ids.to(torch.int32), (weights * scaling_factor).to(torch.float32)


def check_expert_ids(fn: str, topk_ids, num_experts) -> None:
    """Raise ``ValueError`` (naming ``fn``) unless ``topk_ids`` is a 2-D integer tensor ``[T, top_k]``
    and ``num_experts`` a positive int. The ids' values are not checked (that would need a sync)."""
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2 or topk_ids.dtype.is_floating_point \
            or topk_ids.dtype == torch.bool:
        raise ValueError(f"{fn}: topk_ids must be a 2-D integer tensor [T, top_k]; got "
                         f"{getattr(topk_ids, 'dtype', type(topk_ids).__name__)} "
                         f"{tuple(getattr(topk_ids, 'shape', ()))}.")
    if not isinstance(num_experts, int) or num_experts < 1:
        raise ValueError(f"{fn}: num_experts must be a positive int; got {num_experts!r}.")


def expert_counts(topk_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """int32 [E]: how many (token, slot) pairs chose each expert. Device-side ``scatter_add_``
    (``torch.bincount`` on CUDA reads the maximum back to the host, so it is not used)."""
    check_expert_ids("expert_counts", topk_ids, num_experts)
    flat = topk_ids.reshape(-1).to(torch.int64)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    return counts.to(torch.int32)
