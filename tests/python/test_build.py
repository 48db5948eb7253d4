"""tdaot.build and the export stage: manifests, options and every build-time error."""

from __future__ import annotations

import json
import logging
import warnings
import zipfile

import pytest
import tensordict
import torch
from examples.policies import nested_policy, recurrent_policy, tutorial_policy
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import tdaot
from tdaot import _C
from tdaot.builder.export import DEFAULT_BATCH_RANGE, export_policy
from tdaot.manifest import Manifest


def test_tutorial_manifest_describes_the_policy(tutorial):
    _, _, artifact = tutorial
    m = artifact.manifest
    assert [(s.key, s.dtype, s.shape) for s in m.inputs] == [("observation", "float32", (3,))]
    assert [(s.key, s.dtype, s.shape) for s in m.outputs] == [
        ("loc", "float32", (2,)),
        ("scale", "float32", (2,)),
        ("sample", "float32", (2,)),
    ]
    assert m.batch == DEFAULT_BATCH_RANGE and m.batch.dynamic
    assert (m.interaction_type, m.device, m.cpu_target) == ("deterministic", "cpu", "native")
    assert m.cpu_isa == str(torch._inductor.cpu_vec_isa.pick_vec_isa())
    assert (m.torch_version, m.tensordict_version) == (torch.__version__, tensordict.__version__)
    assert m.tdaot_version == tdaot.__version__
    assert m.source == tdaot.Source("tensordict.nn.sequence.TensorDictSequential", "tutorial_policy")
    assert artifact.size_bytes > 0 and artifact.export_seconds > 0 and artifact.compile_seconds > 0


def test_nested_keys_are_dot_joined_in_order(nested):
    m = nested[2].manifest
    assert [(s.key, s.shape) for s in m.inputs] == [("agents.observation", (2, 5)), ("robot.joints", (7,))]
    assert [(s.key, s.shape) for s in m.outputs] == [("agents.action", (2, 2)), ("robot.command", (7,))]


def test_manifest_round_trips_through_the_package_and_cpp(tutorial):
    artifact = tutorial[2]
    from_package = tdaot.read_manifest(artifact.path)
    assert from_package == artifact.manifest
    assert Manifest.from_json(from_package.to_json()) == from_package
    # The C++ reader parses and re-serialises the same schema.
    assert json.loads(_C.read_manifest_json(artifact.path)) == from_package.to_dict()


def test_recurrent_state_pairs_are_recorded():
    policy, example = recurrent_policy()
    exported = export_policy(policy, example)
    assert exported.recurrent == tdaot.Recurrent(
        state=(tdaot.StatePair(input="hidden", output="next.hidden"),), is_init="is_init"
    )
    assert export_policy(policy, example, out_keys=["action"]).recurrent is None


def test_recurrent_manifest_round_trips():
    policy, example = recurrent_policy()
    exported = export_policy(policy, example)
    data = {
        "schema_version": 2,
        "inputs": [{"key": s.key, "dtype": s.dtype, "shape": list(s.shape)} for s in exported.inputs],
        "outputs": [{"key": s.key, "dtype": s.dtype, "shape": list(s.shape)} for s in exported.outputs],
        "batch": {"min": 1, "max": 8},
        "interaction_type": "deterministic",
        "device": "cpu",
        "cpu_target": "native",
        "cpu_isa": "",
        "torch_version": "2.13.0",
        "tensordict_version": "0.14.3",
        "tdaot_version": "0.2.0",
        "source": {"module_class": "m", "factory": None},
        "recurrent": {"state": [{"input": "hidden", "output": "next.hidden"}], "is_init": "is_init"},
        "files": {"data/aotinductor/model/m.wrapper.so": "0" * 64},
    }
    manifest = Manifest.from_dict(data)
    assert manifest.recurrent == exported.recurrent
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert manifest.to_dict() == data


def test_mismatched_recurrent_state_is_refused():
    module = TensorDictModule(lambda h: h[..., :2], in_keys=["hidden"], out_keys=[("next", "hidden")])
    example = TensorDict({"hidden": torch.zeros(4, 3)}, batch_size=[4])
    with pytest.raises(
        tdaot.BuildError,
        match=r"recurrent state 'hidden' is float32 \[3\] but .*'next.hidden' is float32 \[2\]",
    ):
        export_policy(module, example)


def test_out_keys_can_be_selected():
    policy, example = tutorial_policy()
    exported = export_policy(policy, example, out_keys=["sample"])
    assert [s.key for s in exported.outputs] == ["sample"]


def test_an_example_without_a_batch_dim_is_refused_with_the_way_to_give_it_one():
    policy, example = tutorial_policy()
    with pytest.raises(
        tdaot.BuildError,
        match=r"the example TensorDict has no batch dim \(batch_size=\[\]; it holds observation \[3\]\): "
        r"tdaot reads the batch dim from example.batch_size\[0\]. Give it one: TensorDict\(..., "
        r"batch_size=\[N\]\) for N samples, or example.unsqueeze\(0\) for one sample",
    ):
        export_policy(policy, example[0])


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ("dynamic", DEFAULT_BATCH_RANGE),
        ("static", tdaot.BatchRange(4, 4)),
        (6, tdaot.BatchRange(6, 6)),
        ((2, 32), tdaot.BatchRange(2, 32)),
        ((1, 1), tdaot.BatchRange(1, 1)),
    ],
)
def test_batch_options(batch, expected):
    policy, example = tutorial_policy()
    assert export_policy(policy, example, batch=batch).batch == expected


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ("sometimes", "'sometimes': expected 'dynamic', 'static'"),
        ((8, 2), r"\(8, 2\): need 1 <= min <= max"),
        (0, "batch=0: need 1 <= min <= max"),
    ],
)
def test_bad_batch_option_is_refused(batch, message):
    policy, example = tutorial_policy()
    with pytest.raises(tdaot.BuildError, match=message):
        export_policy(policy, example, batch=batch)


def test_unknown_out_key_names_the_key():
    policy, example = tutorial_policy()
    with pytest.raises(
        tdaot.BuildError, match=r"out-key 'action' is not produced by .*TensorDictSequential.*loc"
    ):
        export_policy(policy, example, out_keys=["action"])


def test_missing_in_key_names_the_key():
    policy, _ = tutorial_policy()
    with pytest.raises(
        tdaot.BuildError, match=r"in-key 'observation' .* missing from the example .*has: obs"
    ):
        export_policy(policy, TensorDict({"obs": torch.zeros(2, 3)}, batch_size=[2]))


def test_key_with_a_dot_is_refused():
    module = TensorDictModule(nn.Linear(3, 2), in_keys=["obs.raw"], out_keys=["action"])
    with pytest.raises(tdaot.KeyNameError, match=r"part 'obs.raw' .* contains '\.'.*'obs_raw'"):
        export_policy(module, TensorDict({"obs.raw": torch.zeros(2, 3)}, batch_size=[2]))


def test_plain_module_is_refused_with_a_hint():
    with pytest.raises(tdaot.BuildError, match="got torch.nn.modules.linear.Linear.*TensorDictModule"):
        export_policy(nn.Linear(3, 2), TensorDict({}, batch_size=[2]))


def test_unknown_interaction_type_is_refused():
    policy, example = tutorial_policy()
    with pytest.raises(tdaot.BuildError, match="interaction_type='greedy' is not one of"):
        export_policy(policy, example, interaction_type="greedy")


class _BatchSpecialising(nn.Module):
    def forward(self, x):
        # Reshaping with the literal batch size pins the batch dim (as torchrl's LSTMModule
        # does, unless tdaot's rnn_single_step rewrite replaces its reshape).
        return x.reshape(4, 3) * 2


def test_batch_specialisation_falls_back_to_static_with_a_warning():
    module = TensorDictModule(_BatchSpecialising(), in_keys=["x"], out_keys=["y"])
    example = TensorDict({"x": torch.randn(4, 3)}, batch_size=[4])
    with pytest.warns(
        tdaot.StaticBatchWarning,
        match=r"TensorDictModule wrapping .*_BatchSpecialising specialises the batch dim.*static batch of 4",
    ):
        exported = export_policy(module, example)
    assert exported.batch == tdaot.BatchRange(4, 4)


class _DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # Python control flow on a tensor value cannot be traced
            return x
        return -x


def test_export_failure_names_the_module_and_quotes_the_error():
    module = TensorDictModule(_DataDependent(), in_keys=["x"], out_keys=["y"])
    example = TensorDict({"x": torch.randn(4, 3)}, batch_size=[4])
    with pytest.raises(tdaot.ExportError) as info:
        export_policy(module, example)
    message = str(info.value)
    assert message.startswith(
        "torch.export failed for tensordict.nn.common.TensorDictModule wrapping test_build._DataDependent "
        "(in keys: x; out keys: y):\n    GuardOnDataDependentSymNode"
    )
    assert "if x.sum() > 0:" in message  # the user's line that raised it
    assert "Hint: the policy branches on a tensor's value" in message and "torch.cond" in message


@pytest.mark.parametrize("interaction_type", ["deterministic", "mode", "mean", "random"])
def test_every_interaction_type_exports(interaction_type):
    policy, example = tutorial_policy()
    exported = export_policy(policy, example, interaction_type=interaction_type)
    targets = {n.target for n in exported.program.graph.nodes if n.op == "call_function"}
    sampled = any("normal" in str(t) for t in targets)
    assert sampled == (interaction_type == "random")


def test_policy_failing_eagerly_is_a_build_error_naming_it():
    policy, example = tutorial_policy()
    with pytest.raises(
        tdaot.BuildError,
        match=r"TensorDictSequential failed on the example TensorDict: .*Normal'>.median is not implemented",
    ):
        export_policy(policy, example, interaction_type="median")


def test_distribution_validation_is_restored_after_export():
    previous = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(True)
    try:
        policy, example = tutorial_policy()
        export_policy(policy, example)
        assert torch.distributions.Distribution._validate_args is True
    finally:
        torch.distributions.Distribution.set_default_validate_args(previous)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("policy.onnx", r"must end with \.pt2"),
        ("/dev/null/policy.pt2", "cannot create the directory of output path '/dev/null/policy.pt2'"),
    ],
)
def test_unwritable_output_path_fails_before_export(path, message):
    policy, example = tutorial_policy()
    with pytest.raises(tdaot.BuildError, match=message):
        tdaot.build(policy, example, path)


def test_cuda_device_without_cuda_is_refused():
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    policy, example = nested_policy()
    with pytest.raises(tdaot.BuildError, match="device 'cuda' .* no CUDA device"):
        tdaot.build(policy, example, "x.pt2", device="cuda")


class _Wide(nn.Module):
    def forward(self, x):
        return torch.tanh(x * 2 + 1).softmax(-1)


def _kernel_sources(path) -> str:
    """The C++ sources of the package's dynamic model (tuning="auto" adds batch-1 ones)."""
    with zipfile.ZipFile(path) as package:
        return "".join(
            package.read(n).decode()
            for n in package.namelist()
            if n.endswith(".cpp") and "/data/aotinductor/model/" in n
        )


@pytest.mark.parametrize(
    ("kernel_threads", "pragma"),
    [(1, None), (0, "#pragma omp parallel\n"), (3, "#pragma omp parallel num_threads(3)")],
    ids=["serial-default", "run-time", "fixed"],
)
def test_kernel_threads_never_carry_the_build_machine_count(tmp_path, kernel_threads, pragma):
    module = TensorDictModule(_Wide(), in_keys=["x"], out_keys=["y"])
    example = TensorDict({"x": torch.randn(4, 1 << 16)}, batch_size=[4])
    options = {} if kernel_threads == 1 else {"kernel_threads": kernel_threads}
    # One throughput model: the sources checked are the dynamic model's, a batch-1 model adds none.
    artifact = tdaot.build(
        module, example, tmp_path / "wide.pt2", batch=(1, 8), tuning="throughput", **options
    )
    sources = _kernel_sources(artifact.path)
    if pragma is None:
        assert "#pragma omp parallel" not in sources
    else:
        assert pragma in sources and sources.count("num_threads(") == pragma.count("num_threads(")
    tdaot.testing.assert_parity(module, artifact, example, batch_sizes=[1, 4])


def test_bad_kernel_threads_is_refused_before_export():
    policy, example = tutorial_policy()
    with pytest.raises(tdaot.BuildError, match=r"kernel_threads=-1: expected 0 \(decided at run time\)"):
        tdaot.build(policy, example, "x.pt2", kernel_threads=-1)


class _GRUPolicy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(3, 4, batch_first=True)

    def forward(self, x):
        warnings.warn("the policy's own warning", UserWarning, stacklevel=1)
        return self.gru(x)[0]


def test_torchs_warnings_about_its_own_code_in_the_trace_are_silenced_and_the_users_pass():
    policy = TensorDictModule(_GRUPolicy(), in_keys=["x"], out_keys=["y"])
    example = TensorDict({"x": torch.zeros(2, 5, 3)}, batch_size=[2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_policy(policy, example)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "_flat_weights" in m or "isinstance(treespec" in m], messages
    assert "the policy's own warning" in messages


def test_torchs_structured_trace_records_stay_out_of_the_tests_captured_log(caplog):
    policy, example = tutorial_policy()
    caplog.set_level(logging.DEBUG)
    torch.export.export(nn.Linear(3, 2), (torch.zeros(2, 3),), strict=False)
    # torch's own export, without tdaot, writes them (the records a failing test showed as empty lines)
    assert any(r.name == "torch.__trace" for r in caplog.records), "torch no longer logs torch.__trace"
    caplog.clear()
    export_policy(policy, example)
    logging.getLogger("policy.own").debug("the user's own record")
    assert [r.name for r in caplog.records if r.name.startswith("torch.__trace")] == []
    assert "the user's own record" in caplog.messages
