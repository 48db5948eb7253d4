"""CUDA: the example policies and the torchrl families of test_policies.py built for
``device="cuda"`` match eager on the GPU (assert_parity), and the bound run, with and without a
CUDA graph, matches the policy's own run and runs on the caller's current stream.

Every test but the last needs a GPU and skips without one; `make test-cuda` runs them on a GPU
machine (tests/cuda/run.sh). Each test compiles its own package (pytest-xdist spreads them).
"""

from __future__ import annotations

import pytest
import torch
from examples import policies as E
from test_policies import ARTIFACTS, STATIC_BATCH

import tdaot
from tdaot.testing import assert_parity, assert_statistical_parity

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

EXAMPLES = {
    "tutorial": (E.tutorial_policy, {}),
    "nested": (E.nested_policy, {}),
    "recurrent": (E.recurrent_policy, {}),
    "legged": (E.legged_policy, {"contract": E.legged_contract()}),
}


def _build(tmp_path, name: str, factory, **options):
    """(policy, example, artifact) with the policy and example on the GPU, the package for cuda."""
    policy, example = factory()
    if name in STATIC_BATCH:
        with pytest.warns(tdaot.StaticBatchWarning, match=STATIC_BATCH[name]):
            artifact = tdaot.build(policy, example, tmp_path / f"{name}.pt2", device="cuda", **options)
    else:
        artifact = tdaot.build(policy, example, tmp_path / f"{name}.pt2", device="cuda", **options)
    assert artifact.manifest.device == "cuda"
    return policy.to("cuda"), example.to("cuda"), artifact


@needs_cuda
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_policy_matches_eager_on_the_gpu(tmp_path, name):
    factory, options = EXAMPLES[name]
    policy, example, artifact = _build(tmp_path, name, factory, **options)
    report = assert_parity(policy, artifact, example)
    assert report.rows


@needs_cuda
@pytest.mark.parametrize("name", sorted(ARTIFACTS))
def test_torchrl_family_matches_eager_on_the_gpu(tmp_path, name):
    factory, options = ARTIFACTS[name]
    policy, example, artifact = _build(tmp_path, name, factory, **options)
    if options.get("interaction_type") == "random":
        report = assert_statistical_parity(policy, artifact, example)
    else:
        report = assert_parity(policy, artifact, example)
    assert report.rows


@pytest.fixture(scope="module")
def tutorial_cuda(tmp_path_factory):
    """The tutorial policy (eager, on the GPU) and its loaded cuda package."""
    policy, _, artifact = _build(tmp_path_factory.mktemp("cuda"), "tutorial", E.tutorial_policy)
    return policy, tdaot.load(artifact.path)


@needs_cuda
def test_a_cuda_binding_refuses_the_flight_recorder(tutorial_cuda):
    """bind(record=N) records CPU bindings only: a CUDA package's is refused, naming it."""
    _, native = tutorial_cuda
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"record = 4: package '.*' runs on 'cuda'.*CPU bindings only"
    ):
        native.bind(1, record=4)


@needs_cuda
@pytest.mark.parametrize("cuda_graph", [False, True])
@pytest.mark.parametrize("batch", [1, 64])
def test_bound_run_matches_run_on_the_gpu(tutorial_cuda, batch, cuda_graph):
    _, native = tutorial_cuda
    binding = native.bind(batch, cuda_graph=cuda_graph)
    assert binding.cuda_graph is cuda_graph
    for _ in range(3):  # a graph reads the binding's inputs as they are at each run
        observation = torch.randn(batch, 3, device="cuda")
        binding.inputs["observation"].copy_(observation)
        binding.run()
        expected = native.run_positional(observation)
        for got, want in zip(binding.outputs.values(), expected):
            assert got.device.type == "cuda"
            torch.testing.assert_close(got, want)


@needs_cuda
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_bound_run_takes_the_callers_stream(tutorial_cuda, cuda_graph):
    """The input is written on a side stream behind a long spin kernel: a run on any other
    stream would read it before it is written."""
    _, native = tutorial_cuda
    binding = native.bind(4, cuda_graph=cuda_graph)
    observation = torch.randn(4, 3, device="cuda")
    expected = native.run_positional(observation)
    binding.inputs["observation"].zero_()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        binding.inputs["observation"].copy_(observation, non_blocking=True)
        binding.run()
        assert not side.query(), "the side stream finished before the spin kernel could"
    side.synchronize()
    for got, want in zip(binding.outputs.values(), expected):
        torch.testing.assert_close(got, want)


def test_cuda_graph_binding_of_a_cpu_package_is_refused(tutorial_native):
    message = r"cuda_graph is for CUDA packages, but package '.*tutorial.pt2' was built for device 'cpu'"
    with pytest.raises(tdaot.TdaotError, match=message):
        tutorial_native.bind(1, cuda_graph=True)
