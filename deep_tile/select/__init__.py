"""Kernel configuration selection: pure Python, (:class:`deep_tile.gemm.problem.Problem`, num_sms) -> :class:`KernelConfig`.

Imports neither torch nor cuda; ``deep_tile.device`` supplies the device facts. Modules:

- :mod:`.config`: :class:`KernelConfig`, validated and derived through the kernel's contract
  (:mod:`deep_tile.kernels.fp8_gemm`).
- :mod:`.candidates`: the kernel instances considered for a problem.
- :mod:`.cost`: the performance model that predicts each candidate's time.
- :mod:`.selector`: :func:`select_config` (pure, cached): the fastest candidate and its grid.
- :mod:`.report`: :func:`explain_text`, the human-readable reasoning.
- :mod:`.api`: :func:`get_config` and :func:`explain` for the current device.
"""
from deep_tile.select.candidates import Candidate, enumerate_candidates
from deep_tile.select.config import KernelConfig
from deep_tile.select.cost import Estimate, estimate
from deep_tile.select.report import explain_text
from deep_tile.select.selector import rank_candidates, select_config

__all__ = ["KernelConfig", "Candidate", "Estimate", "enumerate_candidates", "estimate", "rank_candidates",
           "select_config", "explain_text"]
