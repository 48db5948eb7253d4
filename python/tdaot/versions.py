"""How tdaot reads a torch version: one reading for every comparison it makes.

A torch release reaches users under several spellings of one version: ``torch/version.py``'s
``__version__`` carries the build's local tag (``2.15.0+cu132``, ``2.13.0+cpu``), while the
installed distribution's metadata of PyPI's CUDA wheels does not (``2.15.0``). Builds of one
release share its C++ ABI and its serialization, so tdaot compares releases: the public version,
the local tag dropped. Torch-free, imported by ``import tdaot`` before anything else.
"""

from __future__ import annotations


def torch_release(version: str) -> str:
    """``version`` without its local tag: ``2.15.0+cu132`` -> ``2.15.0``."""
    return version.strip().split("+", 1)[0]


def same_torch_release(a: str, b: str) -> bool:
    """Whether two torch version strings name the same release, whatever their local tags."""
    return torch_release(a) == torch_release(b)
