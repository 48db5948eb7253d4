"""PolicyOptions.keep_freed_memory (tdaot.load's keep_freed_memory): the memory a call frees
serves the next call instead of being handed back to the system and page-faulted in again,
unless the environment sets glibc's malloc thresholds itself. Each case runs in a fresh process
(the setting is process-wide and glibc's thresholds move with what a process allocated).

AOTInductor compiles: one small MLP, dynamic model only.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
from conftest import elu_mlp_policy

import tdaot

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

# After loading (or not), an 8 MiB block is written and freed, and the page faults of writing a
# second one counted: 0 where the first block's memory was kept, ~2048 where it went back.
REUSE_PROBE = """
import ctypes, resource, sys, tdaot
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
tdaot.load(sys.argv[1], keep_freed_memory=sys.argv[2] == "1")
size = 8 << 20
first = libc.malloc(size)
ctypes.memset(first, 1, size)
libc.free(first)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
ctypes.memset(libc.malloc(size), 1, size)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
# Page faults per call of the policy at four batch sizes in turn (1-16 MiB intermediates).
CALLS_PROBE = """
import resource, sys, torch, tdaot
policy = tdaot.load(sys.argv[1], keep_freed_memory=sys.argv[2] == "1")
inputs = [torch.randn(rows, 8) for rows in (16384, 1024, 65536, 4096)]
for x in inputs:
    policy.run_positional(x)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    for x in inputs:
        policy.run_positional(x)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    policy, _, example = elu_mlp_policy(8, 64, 2)
    return tdaot.build(policy, example, tmp_path_factory.mktemp("freed") / "mlp.pt2", specialize=()).path


def faults(probe: str, package, keep: bool, **environment) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    result = subprocess.run(
        [sys.executable, "-c", probe, str(package), "1" if keep else "0"],
        env={**env, **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(result.stdout.strip().splitlines()[-1])


def test_a_freed_block_serves_the_next_one_after_loading(package):
    assert faults(REUSE_PROBE, package, keep=True) < 16
    assert faults(REUSE_PROBE, package, keep=False) > 1000  # glibc handed it back


def test_calls_at_changing_batch_sizes_fault_nothing_in(package):
    assert faults(CALLS_PROBE, package, keep=True) < 10


@pytest.mark.parametrize(
    "environment",
    [{"MALLOC_TRIM_THRESHOLD_": "0"}, {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}],
)
def test_the_environments_malloc_settings_stand(package, environment):
    # A trim threshold of 0 hands every freed block back: the runtime leaves it so.
    assert faults(REUSE_PROBE, package, keep=True, **environment) > 1000
