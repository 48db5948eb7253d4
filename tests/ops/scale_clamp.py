"""tdaot_test::scale_clamp from Python: loads the C++ library the C++ build makes
(tests/ops/CMakeLists.txt), registers the fake implementation torch.export traces with, and
offers a policy factory calling the operator (`tdaot build tests/ops/scale_clamp.py:scale_clamp_policy`).

Importing this module loads the library: a factory file must make its operators exist before
the policy is built. The library is found at build/cpp/tests/ops/libtdaot_test_ops.so, or at
$TDAOT_TEST_OPS_LIB.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

OP = "tdaot_test::scale_clamp"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LIBRARY = ROOT / "build" / "cpp" / "tests" / "ops" / "libtdaot_test_ops.so"


def library_path() -> str:
    """The op library: $TDAOT_TEST_OPS_LIB, else where `make cpp` builds it."""
    path = Path(os.environ.get("TDAOT_TEST_OPS_LIB") or DEFAULT_LIBRARY)
    if not path.is_file():
        raise FileNotFoundError(
            f"the custom operator library {str(path)!r} does not exist: build it with `make cpp` "
            "(target tdaot_test_ops) or point TDAOT_TEST_OPS_LIB at it"
        )
    return str(path)


def load() -> str:
    """Loads the library into this process (again is a no-op) and returns its path."""
    path = library_path()
    torch.ops.load_library(path)
    return path


load()


# torch.export runs the policy on fake tensors: the output's shape and dtype without the kernel.
# (allow_override, the default, makes importing this module twice harmless.)
@torch.library.register_fake(OP)
def _scale_clamp_fake(x: torch.Tensor, scale: float, limit: float) -> torch.Tensor:
    return torch.empty_like(x)


class ScaleClampNet(nn.Module):
    """action = scale_clamp(3 tanh(observation), scale, limit): generated kernels around the
    custom op, and no weights, so the C++ tests can compute the expected action with ATen."""

    def __init__(self, scale: float = 2.0, limit: float = 0.5) -> None:
        super().__init__()
        self.scale = scale
        self.limit = limit

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        bounded = torch.ops.tdaot_test.scale_clamp(observation.tanh() * 3.0, self.scale, self.limit)
        return bounded + 1.0


def scale_clamp_policy():
    """(policy, example): observation [3] -> action [3] through tdaot_test::scale_clamp."""
    module = TensorDictModule(ScaleClampNet(), in_keys=["observation"], out_keys=["action"])
    return module, TensorDict({"observation": torch.randn(4, 3)}, batch_size=[4])
