"""The problem descriptor: what one GEMM call asks for, as every layer of deep_tile sees it.

A :class:`Problem` travels from the argument checks (:mod:`deep_tile.gemm.checks`) through the
selector and its cost model (:mod:`deep_tile.select`), the planner and its caches
(:mod:`deep_tile.gemm.planner`, :mod:`deep_tile.gemm.plan_index`), warm-up and ``explain``, instead of
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
    GROUPED_CONTIGUOUS = "grouped_contiguous"
    """Mixture-of-Experts, ``a[m, k]`` with one expert id per row (``m_indices``; each expert's
    rows one run starting at a multiple of 128, other ids padding), ``b[num_groups, n, k]``."""
    GROUPED_MASKED = "grouped_masked"
    """Mixture-of-Experts, ``a[num_groups, m, k]``: group g's first ``masked_m[g]`` rows are real
    (``m`` is max_m, the rows of each group's slab)."""
    GROUPED_OFFSETS = "grouped_offsets"
    """Mixture-of-Experts, ``a[m, k]`` with expert g on rows ``offsets[g] .. offsets[g+1]-1`` (no
    alignment), ``b[num_groups, n, k]``."""
    K_GROUPED = "k_grouped"
    """Mixture-of-Experts weight gradients (1D1D): ``out[g] = a[:, K_g] @ b[:, K_g]^T`` for each
    group g, ``a[m, k]`` and ``b[n, k]`` shared, group g owning the K range of its size (device
    int32 sizes, any values); ``out[num_groups, m, n]``."""

    GROUPED_PSUM = "grouped_psum"
    """Mixture-of-Experts, ``a[m, k]`` in DeepGEMM's psum contiguous layout: expert g's rows end at
    ``expert_ends[g]`` and start at the previous end rounded up to 128 (rows between are padding),
    ``b[num_groups, n, k]``."""

    @property
    def short_name(self) -> str:
        """The kind's name in arguments and labels: ``"dense"``, ``"contiguous"``, ``"masked"``,
        ``"offsets"``, ``"psum"``, ``"k_grouped"`` (what ``kind=`` of :func:`deep_tile.explain` and the
        command line take)."""
        return "k_grouped" if self is ProblemKind.K_GROUPED else self.value.rsplit("_", 1)[-1]

    @property
    def grouped(self) -> bool:
        """Whether the problem has groups (experts): one weight matrix per group (the M-grouped
        kinds), or one output per group (the K-grouped kind)."""
        return self is not ProblemKind.DENSE

    @property
    def has_table(self) -> bool:
        """Whether the kernel keeps a per-group table in shared memory: the masked, offsets and psum
        kinds number their tiles through it (their tile count is known on the device only), the
        K-grouped kind reads each group's K range there."""
        return self in (ProblemKind.GROUPED_MASKED, ProblemKind.GROUPED_OFFSETS, ProblemKind.GROUPED_PSUM,
                        ProblemKind.K_GROUPED)

    @property
    def has_tile_slots(self) -> bool:
        """Whether the kernel's producer hands each tile to the consumers in a slot per stage after
        the table (the masked, offsets and psum kinds; as ``uses_tile_slots`` in
        include/deep_tile/scheduler/tile_scheduler.cuh)."""
        return self.has_table and self is not ProblemKind.K_GROUPED


class Problem:
    """One GEMM problem: ``out[m, n] = (a * a_scale)[m, k] @ ((b * b_scale)[n, k])^T``.

    Attributes:
        kind: the :class:`ProblemKind`.
        m, n, k: rows of ``a`` and ``out`` (for the masked kind the rows of one group's slab,
            max_m), rows of ``b`` (per group), the reduction depth. ``m`` may be a
            ``torch.SymInt`` in the fake implementations (then the problem is only read, never
            hashed).
        num_groups: groups sharing ``a``'s rows (experts); 1 for a dense problem.
        expected_m: rows a group is expected to have, for the selector (``m`` when dense,
            ``m / num_groups`` rounded up by default for the contiguous and offsets kinds).
        a_scale_row_major: whether the kernel reads ``a_scale`` row-major as it is (a kernel
            variant), not in the TMA-aligned column-major layout.
        out_dtype: the output's type, ``"bfloat16"`` (default) or ``"float32"``.
        b_scale_1d: b_scale is per row of B (``[n, ceil(k/128)]``, the 1D1D weight-gradient GEMM)
            instead of per 128x128 block.
        c_dtype: the addend C of ``out = C + A.B^T``: ``"bfloat16"`` or ``"float32"`` (a tensor
            apart from ``out``), ``"out"`` (``out`` itself: in-place accumulation), or None (no C,
            default).

    Equal problems compare and hash equal (a plain class with ``__slots__``, cheap to import:
    the first call of a process builds one).
    """

    __slots__ = ("kind", "m", "n", "k", "num_groups", "expected_m", "a_scale_row_major", "out_dtype", "c_dtype",
                 "b_scale_1d", "_key")

    def __init__(self, m, n: int, k: int, *, kind: ProblemKind = ProblemKind.DENSE, num_groups: int = 1,
                 expected_m=None, a_scale_row_major: bool = False, out_dtype: str = "bfloat16", c_dtype=None,
                 b_scale_1d: bool = False):
        self.kind = kind
        self.m, self.n, self.k = m, n, k
        self.num_groups = num_groups
        if expected_m is None:
            expected_m = m if kind in (ProblemKind.DENSE, ProblemKind.GROUPED_MASKED, ProblemKind.K_GROUPED) \
                else -(-m // num_groups)
        self.expected_m = expected_m
        self.a_scale_row_major = bool(a_scale_row_major)
        self.out_dtype, self.c_dtype, self.b_scale_1d = out_dtype, c_dtype, bool(b_scale_1d)
        # key(), made once: the plan caches hash and compare a problem on every call
        self._key = (kind.value, m, n, k, num_groups, self.expected_m, self.a_scale_row_major)
        if out_dtype != "bfloat16" or c_dtype is not None:  # the default output keeps the key it had
            self._key += (out_dtype, c_dtype)
        if self.b_scale_1d:
            self._key += ("1d1d",)

    @property
    def k_blocks(self) -> int:
        """128-wide scale blocks along K: the columns of ``a_scale`` and ``b_scale``."""
        return ceil_div(self.k, SCALE_GROUP)

    @property
    def rows(self):
        """Rows of ``a`` and ``out`` as the kernel sees them (2-D): ``num_groups * m`` for the
        masked kind, else ``m``."""
        return self.num_groups * self.m if self.kind is ProblemKind.GROUPED_MASKED else self.m

    def m_blocks(self, block_m: int) -> int:
        """Tiles along M of ``block_m`` rows the kernel runs, expected: ``ceil(m / block_m)`` when
        dense or contiguous (padding blocks included); psum, the runs in ``m`` rows (128-aligned
        starts leave half a 128-row block of padding per group on average, and each run's last
        block is half empty: ``(m - 64 G) / block_m + G / 2``, ``m / 128`` for 128-row tiles);
        else one run per group of ``expected_m`` rows."""
        if self.kind is ProblemKind.GROUPED_PSUM:
            real = max(self.m - 64 * self.num_groups, 0)
            return min(max(1, ceil_div(2 * real + self.num_groups * block_m, 2 * block_m)), self.max_m_blocks(block_m))
        if self.kind.has_table:
            return self.num_groups * ceil_div(max(self.expected_m, 0), block_m)
        return ceil_div(self.m, block_m)

    def group_m_blocks(self, block_m: int) -> int:
        """Tiles along M of ``block_m`` rows one group of ``expected_m`` rows is expected to run (at
        least one)."""
        return ceil_div(max(self.expected_m, 1), block_m)

    def max_m_blocks(self, block_m: int) -> int:
        """The most tiles along M the kernel can run for this problem, whatever the device-side
        counts: masked, ``ceil(m / block_m)`` per group; offsets, ``ceil(m / block_m)`` plus one
        partial block per group; psum the same, but ``ceil(m / block_m)`` for tiles of at most 128
        rows (a 128-aligned run's blocks lie in its own rows); else :meth:`m_blocks`."""
        if self.kind is ProblemKind.GROUPED_MASKED:
            return self.num_groups * ceil_div(self.m, block_m)
        if self.kind is ProblemKind.GROUPED_PSUM and block_m <= 128:
            return max(1, ceil_div(self.m, block_m))
        if self.kind in (ProblemKind.GROUPED_OFFSETS, ProblemKind.GROUPED_PSUM):
            return ceil_div(self.m, block_m) + self.num_groups
        return self.m_blocks(block_m)

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
                       expected_m=self.expected_m, a_scale_row_major=row_major, out_dtype=self.out_dtype,
                       c_dtype=self.c_dtype, b_scale_1d=self.b_scale_1d)

    def with_output(self, out_dtype: str = "bfloat16", c_dtype=None) -> "Problem":
        """This problem with output type ``out_dtype`` and addend type ``c_dtype`` (None: no C)."""
        return Problem(self.m, self.n, self.k, kind=self.kind, num_groups=self.num_groups,
                       expected_m=self.expected_m, a_scale_row_major=self.a_scale_row_major, out_dtype=out_dtype,
                       c_dtype=c_dtype, b_scale_1d=self.b_scale_1d)

    def with_b_scale_1d(self, b_scale_1d: bool = True) -> "Problem":
        """This problem with b_scale per row of B (1D1D: ``[n, ceil(k/128)]``) or not."""
        return Problem(self.m, self.n, self.k, kind=self.kind, num_groups=self.num_groups,
                       expected_m=self.expected_m, a_scale_row_major=self.a_scale_row_major,
                       out_dtype=self.out_dtype, c_dtype=self.c_dtype, b_scale_1d=b_scale_1d)

    def __eq__(self, other) -> bool:
        return isinstance(other, Problem) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        extra = "" if self.num_groups == 1 else f", num_groups={self.num_groups}, expected_m={self.expected_m}"
        layout = ", a_scale_row_major=True" if self.a_scale_row_major else ""
        if self.out_dtype != "bfloat16" or self.c_dtype is not None:
            layout += f", out_dtype={self.out_dtype!r}, c_dtype={self.c_dtype!r}"
        if self.b_scale_1d:
            layout += ", b_scale_1d=True"
        return f"Problem({self.kind.value}, m={self.m}, n={self.n}, k={self.k}{extra}{layout})"

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"
