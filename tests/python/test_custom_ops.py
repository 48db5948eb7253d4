"""Policies calling a custom operator: tdaot_test::scale_clamp, a C++ kernel in its own shared
library (tests/ops, built by `make cpp`) with a Python fake implementation. The package is built
once; its manifest lists the operator; the native runner finds it registered by the Python
process, loads it from op_libraries, and refuses to load without it, naming the operator."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from conftest import ROOT
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

import tdaot
from tdaot import _C
from tdaot._torch_compat import python_registration
from tdaot.builder.checks import custom_operators
from tdaot.cli import main
from tdaot.manifest import Manifest
from tdaot.testing import assert_parity

sys.path.insert(0, str(ROOT / "tests" / "ops"))
import scale_clamp  # noqa: E402 - loads the op library (fails naming it when it is not built)

OP = scale_clamp.OP


@pytest.fixture(scope="module")
def custom_op_build(tmp_path_factory):
    """(policy, example, artifact, statuses, warnings) for scale_clamp_policy, dynamic batch:
    two AOTI compiles (the dynamic model and the batch-1 model, not for the bound run)."""
    policy, example = scale_clamp.scale_clamp_policy()
    statuses: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        artifact = tdaot.build(
            policy,
            example,
            tmp_path_factory.mktemp("custom_op") / "scale_clamp.pt2",
            on_status=statuses.append,
        )
    return (
        policy,
        example,
        artifact,
        statuses,
        [w for w in caught if w.category is tdaot.SpecialisationWarning],
    )


@pytest.fixture(scope="module")
def custom_op(custom_op_build):
    return custom_op_build[:3]


def test_the_bound_attempt_is_refused_before_compiling(custom_op_build):
    # AOTInductor calls a custom operator through its proxy executor, which the bound run lacks:
    # known from the manifest's custom_ops, so the batch-1 model compiles once, without it.
    _, _, artifact, statuses, warned = custom_op_build
    assert statuses == ["exporting", "compiling", "compiling b1"]
    (warning,) = warned
    assert "'b1'" in str(warning.message) and "proxy executor" in str(warning.message)
    assert [(m.name, m.batch.min) for m in artifact.manifest.models] == [("model", 1), ("b1", 1)]


def test_manifest_lists_the_custom_operator(custom_op, capsys):
    artifact = custom_op[2]
    assert artifact.manifest.custom_ops == (OP,)
    assert tdaot.read_manifest(artifact.path).custom_ops == (OP,)
    assert json.loads(_C.read_manifest_json(artifact.path))["custom_ops"] == [OP]
    assert main(["inspect", artifact.path]) == 0
    assert f"custom ops        {OP}" in capsys.readouterr().out


def test_native_matches_eager_with_the_op_registered_by_python(custom_op):
    policy, example, artifact = custom_op
    # The values cover both clamp bounds and the linear part between them.
    wide = TensorDict({"observation": torch.linspace(-2, 2, 15).reshape(5, 3)}, batch_size=[5])
    assert_parity(policy, artifact, example)
    assert_parity(policy, tdaot.load(artifact.path, op_libraries=[scale_clamp.library_path()]), wide)


# Each runs in a fresh interpreter, where only what the snippet loads is registered.
LOAD_IN_FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys, torch, tdaot
    path, libraries = sys.argv[1], json.loads(sys.argv[2])
    try:
        native = tdaot.load(path, op_libraries=libraries)
    except tdaot.TdaotError as err:
        print(json.dumps({"error": type(err).__name__, "message": str(err),
                          "op": getattr(err, "op", None), "path": err.path}))
    else:
        out = native(observation=torch.linspace(-2, 2, 15).reshape(5, 3))["action"]
        print(json.dumps({"action": out.tolist()}))
    """
)


def _load_in_fresh_process(path: str, libraries: list[str]) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", LOAD_IN_FRESH_PROCESS, path, json.dumps(libraries)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_load_without_the_library_names_the_operator(custom_op):
    path = custom_op[2].path
    result = _load_in_fresh_process(path, [])
    assert result["error"] == "MissingOperatorError"
    assert result["op"] == OP and result["path"] == path
    assert f"package '{path}' calls the custom operator '{OP}'" in result["message"]
    assert "tdaot.load(..., op_libraries=[...])" in result["message"]
    assert issubclass(tdaot.MissingOperatorError, tdaot.HostMismatchError)


def test_load_with_op_libraries_in_a_fresh_process_matches_eager(custom_op):
    policy, _, artifact = custom_op
    result = _load_in_fresh_process(artifact.path, [scale_clamp.library_path()])
    observation = torch.linspace(-2, 2, 15).reshape(5, 3)
    expected = policy(TensorDict({"observation": observation}, batch_size=[5]))["action"]
    torch.testing.assert_close(torch.tensor(result["action"]), expected)


def test_a_library_that_cannot_be_loaded_is_named(custom_op, tmp_path):
    missing = str(tmp_path / "libmissing_ops.so")
    with pytest.raises(
        tdaot.PackageError, match=f"custom operator library '{missing}' could not be loaded: .*No such file"
    ) as info:
        tdaot.load(custom_op[2].path, op_libraries=[missing])
    assert info.value.path == missing


class BranchOnNorm(torch.nn.Module):
    """The custom op only inside a torch.cond branch."""

    def forward(self, x):
        return torch.cond(
            x.norm() > 1.0,
            lambda x: torch.ops.tdaot_test.scale_clamp(x, 1.0, 1.0),
            lambda x: x.relu(),
            (x,),
        )


def test_custom_operators_are_found_inside_higher_order_op_subgraphs():
    program = torch.export.export(BranchOnNorm(), (torch.randn(4, 3),))
    assert custom_operators(program) == (OP,)
    plain = torch.export.export(torch.nn.Linear(3, 2), (torch.randn(4, 3),))
    assert custom_operators(plain) == ()


def test_manifest_custom_ops_field_round_trips_and_is_optional(custom_op):
    data = custom_op[2].manifest.to_dict()
    assert data["custom_ops"] == [OP]
    assert Manifest.from_dict(data).to_dict() == data
    without = {k: v for k, v in data.items() if k != "custom_ops"}
    assert Manifest.from_dict(without).custom_ops == ()
    assert "custom_ops" not in Manifest.from_dict(without).to_dict()
    assert "custom ops" not in Manifest.from_dict(without).describe()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("tdaot_test::x", "field 'custom_ops': expected an array, got \"tdaot_test::x\""),
        (
            ["scale_clamp"],
            "field 'custom_ops\\[0\\]': 'scale_clamp' is not a qualified operator name \\(namespace::name\\)",
        ),
        ([OP, 3], "field 'custom_ops\\[1\\]': expected a string, got 3"),
    ],
)
def test_bad_custom_ops_field_is_named(custom_op, value, message):
    data = {**custom_op[2].manifest.to_dict(), "custom_ops": value}
    with pytest.raises(tdaot.ManifestError, match=message):
        Manifest.from_dict(data, "x.pt2")


@torch.library.custom_op("tdaot_pytest::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _twice_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class PythonOpNet(torch.nn.Module):
    def forward(self, observation):
        return torch.ops.tdaot_pytest.twice(observation).tanh()


def test_a_custom_operator_implemented_in_python_fails_the_build(tmp_path):
    policy = TensorDictModule(PythonOpNet(), in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(4, 3)}, batch_size=[4])
    with pytest.raises(
        tdaot.BuildError,
        match=r"custom operator 'tdaot_pytest::twice' is implemented in Python \(registered at "
        r".*custom_ops\.py:\d+\), but a tdaot package runs without Python.*op_libraries=\[\.\.\.\]",
    ):
        tdaot.build(policy, example, tmp_path / "python_op.pt2")
    assert not (tmp_path / "python_op.pt2").exists()


def test_a_cpp_operator_is_not_reported_as_python():
    assert python_registration(OP, "cpu") is None
    assert re.search(r"custom_ops\.py:\d+$", python_registration("tdaot_pytest::twice", "cpu"))
