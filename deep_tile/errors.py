"""Exception types raised by deep_tile.

Bad arguments raise the standard ``ValueError`` / ``TypeError`` (with the function, the
argument, what was expected and what was passed). Everything else deep_tile raises derives
from :class:`DeepTileError`.
"""


class DeepTileError(RuntimeError):
    """Base class of deep_tile's own errors."""


class UnsupportedProblemError(DeepTileError, ValueError):
    """The problem (shape, device, layout) is valid input but no kernel can run it."""


class CompileError(DeepTileError):
    """A kernel failed to compile, or was rejected by the ptxas check.

    Attributes:
        command: the compiler command line or NVRTC option list, as a string.
        log: the compiler's full output.
        source_path: path of the kept source file (or entry file) that failed.
    """

    def __init__(self, message: str, *, command: str = "", log: str = "", source_path: str = ""):
        self.command = command
        self.log = log
        self.source_path = source_path
        parts = [message]
        if command:
            parts.append(f"command: {command}")
        if source_path:
            parts.append(f"source: {source_path}")
        if log:
            parts.append("compiler log:\n" + log.rstrip())
        super().__init__("\n".join(parts))


class CacheError(DeepTileError):
    """The kernel cache directory cannot be used (for example it is not writable, or a file stands
    where it or one of its parents belongs). The message names ``DEEP_TILE_CACHE_DIR``.

    Damaged entries inside a usable cache never raise it: they are discarded and rebuilt. The
    native host path never raises it either: it warns once and the Python host path runs."""


class LaunchError(DeepTileError):
    """A CUDA driver call (load, attribute, tensor map, launch) failed."""
