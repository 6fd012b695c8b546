"""Kernel configuration selection: pure Python, (m, n, k, num_sms) -> :class:`KernelConfig`.

Imports neither torch nor cuda; ``deep_tile.device`` supplies the device facts. Modules:

- :mod:`.config`: :class:`KernelConfig` and the shared-memory / register formulas.
- :mod:`.candidates`: the legal tile shapes and their stage counts.
- :mod:`.cost`: the ranking rules and the roofline estimate.
- :mod:`.selector`: :func:`select_config` (pure, cached), multicast, grid and group size.
- :mod:`.report`: :func:`explain_text`, the human-readable reasoning.
"""
from deep_tile.select.candidates import Candidate, enumerate_candidates
from deep_tile.select.config import KernelConfig
from deep_tile.select.cost import Roofline, Score, roofline
from deep_tile.select.report import explain_text
from deep_tile.select.selector import rank_candidates, select_config

__all__ = ["KernelConfig", "Candidate", "Score", "Roofline", "enumerate_candidates", "rank_candidates",
           "roofline", "select_config", "explain_text"]
