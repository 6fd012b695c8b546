"""The problem descriptor: what one GEMM call asks for, as every layer of deep_tile sees it.

A :class:`Problem` travels from the argument checks (:mod:`deep_tile.checks`) through the
selector and its cost model (:mod:`deep_tile.select`), the planner and its caches
(:mod:`deep_tile.planner`, :mod:`deep_tile.plan_index`), warm-up and ``explain``, instead of
loose ``(m, n, k)``. It says which kind of problem it is (:class:`ProblemKind`), its sizes, and
the layout facts that pick a kernel variant (how ``a_scale`` is read).

Naming: ``k_blocks`` are the 128-wide scale blocks along K; ``num_groups`` are the groups of a
grouped problem (the experts of a Mixture-of-Experts layer; 1 for a dense GEMM); the raster
band width of the tile order is the config's ``raster_width``. Nothing else is called a group.

Pure Python, no torch: the selector imports it.
"""
from __future__ import annotations

import enum

from deep_tile.common import SCALE_GROUP, ceil_div

__all__ = ["ProblemKind", "Problem"]


class ProblemKind(enum.Enum):
    """The kinds of GEMM problem the kernels run (the kernel's ``ProblemKind`` in
    include/deep_tile/scheduler/ names the same kinds)."""

    DENSE = "dense"
    """``out[m, n] = a[m, k] @ b[n, k]^T``: one matrix of weights."""


class Problem:
    """One GEMM problem: ``out[m, n] = (a * a_scale)[m, k] @ ((b * b_scale)[n, k])^T``.

    Attributes:
        kind: the :class:`ProblemKind`.
        m, n, k: rows of ``a`` and ``out``, rows of ``b`` (per group), the reduction depth. ``m``
            may be a ``torch.SymInt`` in the fake implementations (then the problem is only read,
            never hashed).
        num_groups: groups sharing ``a``'s rows (experts); 1 for a dense problem.
        expected_m: rows a group is expected to have, for the selector (``m`` when dense).
        a_scale_row_major: whether the kernel reads ``a_scale`` row-major as it is (a kernel
            variant), not in the TMA-aligned column-major layout.

    Equal problems compare and hash equal (a plain class with ``__slots__``, cheap to import:
    the first call of a process builds one).
    """

    __slots__ = ("kind", "m", "n", "k", "num_groups", "expected_m", "a_scale_row_major", "_key")

    def __init__(self, m, n: int, k: int, *, kind: ProblemKind = ProblemKind.DENSE, num_groups: int = 1,
                 expected_m=None, a_scale_row_major: bool = False):
        self.kind = kind
        self.m, self.n, self.k = m, n, k
        self.num_groups = num_groups
        self.expected_m = m if expected_m is None else expected_m
        self.a_scale_row_major = bool(a_scale_row_major)
        # key(), made once: the plan caches hash and compare a problem on every call
        self._key = (kind.value, m, n, k, num_groups, self.expected_m, self.a_scale_row_major)

    @property
    def k_blocks(self) -> int:
        """128-wide scale blocks along K: the columns of ``a_scale`` and ``b_scale``."""
        return ceil_div(self.k, SCALE_GROUP)

    @property
    def shape(self) -> tuple:
        """``(m, n, k)``."""
        return self.m, self.n, self.k

    def key(self) -> tuple:
        """Everything that tells two problems apart, as a tuple (cache keys). A problem is not
        changed after it is made (``with_a_scale_row_major`` makes a new one)."""
        return self._key

    def with_a_scale_row_major(self, row_major: bool = True) -> "Problem":
        """This problem with ``a_scale`` read row-major (or not)."""
        return Problem(self.m, self.n, self.k, kind=self.kind, num_groups=self.num_groups,
                       expected_m=self.expected_m, a_scale_row_major=row_major)

    def __eq__(self, other) -> bool:
        return isinstance(other, Problem) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        extra = "" if self.num_groups == 1 else f", num_groups={self.num_groups}, expected_m={self.expected_m}"
        layout = ", a_scale_row_major=True" if self.a_scale_row_major else ""
        return f"Problem({self.kind.value}, m={self.m}, n={self.n}, k={self.k}{extra}{layout})"

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"
