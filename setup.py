"""Build hook: ship the CUDA headers (include/) and kernel entry files (csrc/) inside the wheel.

Nothing is compiled at install time: kernels are JIT-compiled on first use. For a regular
(non-editable) build the two source trees are copied to ``deep_tile/_data/`` so that
``deep_tile.jit.paths`` finds them next to the installed package. An editable install reads
them straight from the checkout.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED_TREES = ("include", "csrc")


class BuildPyWithKernelSources(build_py):
    """build_py that also copies include/ and csrc/ into the built package."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for tree in SHIPPED_TREES:
            target = Path(self.build_lib) / "deep_tile" / "_data" / tree
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(ROOT / tree, target)


setup(cmdclass={"build_py": BuildPyWithKernelSources})
