"""The bad-input matrix through the bindings: every input of the shared packages (tutorial,
nested, recurrent) broken every way the manifest can describe, through the keyed and the
positional path and a recurrent session's step. Each refusal must be the documented
:class:`tdaot.InputError` subclass with a message naming the key, and the same loaded policy
must still return the reference afterwards. NaN and inf are data: they go through unchanged
and the outputs are what eager torch gives; a session holds such a step (its safety envelope).

The matrix is data: :data:`INPUTS` lists each package's inputs (checked against the built
manifests) and :func:`_cases` turns each input into its bad cases.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

import tdaot
from tdaot.manifest import DTYPES

pytestmark = pytest.mark.filterwarnings(
    "ignore:The PyTorch API of nested tensors is in prototype stage:UserWarning",
    "ignore:Sparse CSR tensor support is in beta state:UserWarning",
)

BATCH = 4
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}

# Each package's inputs in manifest order: (key, dtype, per-sample shape).
INPUTS = {
    "tutorial": [("observation", torch.float32, (3,))],
    "nested": [("agents.observation", torch.float32, (2, 5)), ("robot.joints", torch.float32, (7,))],
    "recurrent": [
        ("observation", torch.float32, (3,)),
        ("hidden", torch.float32, (8,)),
        ("is_init", torch.bool, (1,)),
    ],
}
# Each shared fixture's batch range 1..max: tutorial the default dynamic one, the others the
# C++ suite's packages' (conftest).
BATCH_MAX = {"tutorial": 1048576, "nested": 64, "recurrent": 64}


def _shape_text(shape) -> str:
    return re.escape("[" + ", ".join(str(s) for s in shape) + "]")


def _valid(dtype: torch.dtype, shape, batch: int = BATCH, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (batch, *shape), generator=generator).bool()
    return torch.randn(batch, *shape, generator=generator, dtype=dtype)


def _valid_inputs(package: str, batch: int = BATCH) -> dict[str, torch.Tensor]:
    return {key: _valid(dtype, shape, batch, seed=i) for i, (key, dtype, shape) in enumerate(INPUTS[package])}


@dataclass(frozen=True)
class Case:
    """One bad call: how to change valid inputs (a dict by manifest key, batch 4), the error it
    must raise, the key the error names and a regex its message must match."""

    name: str
    edit: Callable[[dict], None]
    error: type
    key: str
    message: str
    positional: bool = True  # False: exists only by key (missing or unknown keys)
    needs_cuda: bool = False


def _replace(key: str, make: Callable[[], torch.Tensor]) -> Callable[[dict], None]:
    def edit(inputs: dict) -> None:
        inputs[key] = make()

    return edit


def _transposed(good: torch.Tensor) -> torch.Tensor:
    """The same values with the batch dim last in memory."""
    order = list(range(1, good.dim())) + [0]
    back = [order.index(d) for d in range(good.dim())]
    return good.permute(order).contiguous().permute(back)


def _cases(package: str, index: int, *, session: bool = False) -> list[Case]:
    inputs = INPUTS[package]
    key, dtype, shape = inputs[index]
    q = f"input '{re.escape(key)}'"
    expected = re.escape("[B" + "".join(f", {s}" for s in shape) + "]")
    good = _valid(dtype, shape)
    cases = [
        Case(
            "missing",
            lambda d: d.pop(key),
            tdaot.MissingKeyError,
            key,
            rf"missing input key\(s\) '{key}'",
            False,
        ),
        Case(
            "unknown",
            lambda d: d.update({f"{key}_extra": good}),
            tdaot.UnknownKeyError,
            f"{key}_extra",
            rf"unknown input key '{re.escape(key)}_extra'; expected keys: ",
            False,
        ),
    ]
    for name, other in DTYPES.items():
        if other != dtype:
            cases.append(
                Case(
                    f"dtype-{name}",
                    _replace(key, lambda o=other: torch.ones(BATCH, *shape, dtype=o)),
                    tdaot.DtypeError,
                    key,
                    rf"{q} has dtype {name}, expected {DTYPE_NAMES[dtype]}$",
                )
            )
    wider = (*shape[:-1], shape[-1] + 1)
    no_elements = (*shape[:-1], 0)
    for name, bad_shape in [
        ("scalar", ()),
        ("rank-batch-only", (BATCH,)),
        ("rank-one-more", (BATCH, *shape, 1)),
        ("size-plus-one", (BATCH, *wider)),
        ("size-zero-no-elements", (BATCH, *no_elements)),
    ]:
        cases.append(
            Case(
                name,
                _replace(key, lambda s=bad_shape: torch.zeros(s, dtype=dtype)),
                tdaot.ShapeError,
                key,
                rf"{q} has shape {_shape_text(bad_shape)}, expected {expected}$",
            )
        )
    for name, batch in [("batch-0", 0), ("batch-above-max", BATCH_MAX[package] + 1)]:
        if session:
            tail = f"but the session was created for batch size {BATCH}"
        elif index > 0:
            tail = f"but input '{inputs[0][0]}' has batch size {BATCH}"
        else:
            tail = f"but the package accepts batch sizes 1..{BATCH_MAX[package]}"
        cases.append(
            Case(
                name,
                _replace(key, lambda b=batch: torch.empty(b, *shape, dtype=dtype)),
                tdaot.BatchSizeError,
                key,
                rf"{q} has batch size {batch}, {re.escape(tail)}",
            )
        )
    not_contiguous = rf"{q} is not contiguous \(shape .*, strides .*\); .*pass tensor\.contiguous\(\)"
    cases += [
        Case(
            "every-other-row",
            _replace(key, lambda: torch.cat([good, good])[::2]),
            tdaot.LayoutError,
            key,
            not_contiguous,
        ),
        Case(
            "expanded-row",
            _replace(key, lambda: good[:1].expand_as(good)),
            tdaot.LayoutError,
            key,
            not_contiguous,
        ),
        Case(
            "sparse",
            _replace(key, lambda: good.to_sparse()),
            tdaot.LayoutError,
            key,
            rf"{q} has layout Sparse; .*tensor\.to_dense\(\)",
        ),
        Case(
            "meta-device",
            _replace(key, lambda: torch.empty(BATCH, *shape, dtype=dtype, device="meta")),
            tdaot.DeviceError,
            key,
            rf"{q} is on device meta, but the package was built for device cpu",
        ),
        Case(
            "cuda-device",
            _replace(key, lambda: good.to("cuda")),
            tdaot.DeviceError,
            key,
            rf"{q} is on device cuda(:0)?, but the package was built for device cpu",
            needs_cuda=True,
        ),
    ]
    if good[0].numel() > 1:
        cases.append(
            Case(
                "transposed", _replace(key, lambda: _transposed(good)), tdaot.LayoutError, key, not_contiguous
            )
        )
    if dtype.is_floating_point:
        cases += [
            Case(
                "negated-view",
                _replace(key, lambda: torch._neg_view(good)),
                tdaot.LayoutError,
                key,
                rf"{q} is a lazily negated view .*tensor\.resolve_neg\(\)",
            ),
            Case(
                "sparse-csr",
                _replace(key, lambda: good.to_sparse_csr()),
                tdaot.LayoutError,
                key,
                rf"{q} has layout SparseCsr",
            ),
            Case(
                "mkldnn",
                _replace(key, lambda: good.to_mkldnn()),
                tdaot.LayoutError,
                key,
                rf"{q} has layout Mkldnn",
            ),
            Case(
                "nested-strided",
                _replace(key, lambda: torch.nested.nested_tensor(list(good))),
                tdaot.LayoutError,
                key,
                rf"{q} is a nested tensor",
            ),
            Case(
                "nested-jagged",
                _replace(key, lambda: torch.nested.nested_tensor(list(good), layout=torch.jagged)),
                tdaot.LayoutError,
                key,
                rf"{q} is a tensor subclass with its own __torch_dispatch__",
            ),
        ]
    return cases


def _params(paths: list[str], *, session: bool = False):
    packages = ["recurrent"] if session else list(INPUTS)
    for package in packages:
        count = 1 if session else len(INPUTS[package])  # a session's step takes observation only
        for index in range(count):
            for case in _cases(package, index, session=session):
                for path in paths:
                    if path == "positional" and not case.positional:
                        continue
                    marks = (
                        [pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
                        if case.needs_cuda
                        else []
                    )
                    yield pytest.param(
                        package,
                        index,
                        case,
                        path,
                        id=f"{package}-{INPUTS[package][index][0]}-{case.name}-{path}",
                        marks=marks,
                    )


_REFERENCES: dict[str, tuple] = {}


@pytest.fixture
def references(request):
    """package -> (native policy, valid inputs, outputs in manifest order), computed once."""

    def get(package: str):
        native = request.getfixturevalue(f"{package}_native")
        if package not in _REFERENCES or _REFERENCES[package][0] is not native:
            inputs = _valid_inputs(package)
            _REFERENCES[package] = (native, inputs, native.run_positional(*inputs.values()))
        return _REFERENCES[package]

    return get


def _expect_still_right(native, inputs: dict, reference) -> None:
    for got, want in zip(native.run_positional(*inputs.values()), reference):
        assert torch.equal(got, want)
    out = native(inputs)
    for key, want in zip(native.manifest.output_keys, reference):
        assert torch.equal(out[tuple(key.split("."))], want)


def _expect_refused(case: Case, call) -> None:
    with pytest.raises(case.error, match=case.message) as info:
        call()
    assert type(info.value) is case.error  # exactly, not a subclass or the base InputError
    assert info.value.key == case.key
    assert f"'{case.key}'" in str(info.value)


def test_the_matrix_covers_every_manifest_input(tutorial_native, nested_native, recurrent_native):
    for package, native in [
        ("tutorial", tutorial_native),
        ("nested", nested_native),
        ("recurrent", recurrent_native),
    ]:
        manifest = native.manifest
        listed = [(spec.key, DTYPES[spec.dtype], tuple(spec.shape)) for spec in manifest.inputs]
        assert listed == INPUTS[package], package
        assert (manifest.batch.min, manifest.batch.max) == (1, BATCH_MAX[package])
    assert recurrent_native.session(batch=1).input_keys == ["observation"]


@pytest.mark.parametrize(("package", "index", "case", "path"), list(_params(["keyed", "positional"])))
def test_bad_input_is_refused_naming_the_key(references, package, index, case, path):
    native, good, reference = references(package)
    inputs = dict(good)
    case.edit(inputs)
    if path == "keyed":
        _expect_refused(case, lambda: native(inputs))
    else:
        _expect_refused(case, lambda: native.run_positional(*inputs.values()))
    _expect_still_right(native, good, reference)


@pytest.mark.parametrize(("package", "index", "case", "path"), list(_params(["keyed"], session=True)))
def test_bad_session_step_is_refused_and_leaves_the_state(recurrent_native, package, index, case, path):
    session, twin = recurrent_native.session(batch=BATCH), recurrent_native.session(batch=BATCH)
    first = {"observation": _valid(torch.float32, (3,), seed=1)}
    session.step(first)
    twin.step(first)
    inputs = {"observation": _valid(torch.float32, (3,), seed=2)}
    case.edit(inputs)
    _expect_refused(case, lambda: session.step(inputs))
    assert torch.equal(session.state["hidden"], twin.state["hidden"])
    following = {"observation": _valid(torch.float32, (3,), seed=3)}
    assert (session.step(following) == twin.step(following)).all()


@pytest.mark.parametrize("package", list(INPUTS))
def test_wrong_positional_count_lists_the_inputs(references, package):
    native, good, reference = references(package)
    tensors = list(good.values())
    keys = ", ".join(key for key, _, _ in INPUTS[package])
    for given in (tensors[:-1], [*tensors, tensors[0]]):
        message = rf"expected {len(tensors)} inputs \({re.escape(keys)}\), got {len(given)}$"
        with pytest.raises(tdaot.ShapeError, match=message) as info:
            native.run_positional(*given)
        assert info.value.key == ""
        _expect_still_right(native, good, reference)


@pytest.mark.parametrize("package", list(INPUTS))
def test_a_tensordict_path_names_the_nested_key(references, package):
    """From a TensorDict: a missing entry and a wrong dtype name the manifest key."""
    native, good, reference = references(package)
    *_, (last, dtype, shape) = INPUTS[package]
    entries = {tuple(key.split(".")): value for key, value in good.items()}
    wrong = torch.ones(BATCH, *shape, dtype=torch.float64 if dtype != torch.float64 else torch.float32)
    td = TensorDict({k: v for k, v in entries.items() if k != tuple(last.split("."))}, batch_size=[BATCH])
    with pytest.raises(tdaot.MissingKeyError, match=rf"missing input key\(s\) '{re.escape(last)}'"):
        native(td)
    td.set(tuple(last.split(".")), wrong)
    with pytest.raises(tdaot.DtypeError, match=rf"input '{re.escape(last)}' has dtype float"):
        native(td)
    _expect_still_right(native, good, reference)


# --- NaN and inf are data -------------------------------------------------------------
def _eager(policy, inputs: dict) -> TensorDict:
    """The eager policy's outputs, with distribution argument validation off (it refuses a NaN
    loc, where the native artifact, exported with validation off, passes it on)."""
    td = TensorDict(
        {tuple(k.split(".")): v for k, v in inputs.items()},
        batch_size=[next(iter(inputs.values())).shape[0]],
    )
    validate = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        with torch.no_grad(), set_interaction_type(InteractionType.DETERMINISTIC):
            return policy(td)
    finally:
        torch.distributions.Distribution.set_default_validate_args(validate)


@pytest.mark.parametrize(
    ("package", "index"),
    [
        (p, i)
        for p, specs in INPUTS.items()
        for i, (_, dtype, _) in enumerate(specs)
        if dtype.is_floating_point
    ],
    ids=lambda v: str(v),
)
def test_nan_and_inf_pass_through_like_eager(request, package, index):
    """Rows 0-2 of one input are NaN, +inf, -inf; row 3 has one NaN element; row 4 is finite.
    The call succeeds on both paths and every output equals eager torch's, NaN for NaN."""
    policy, _, _ = request.getfixturevalue(package)
    native = request.getfixturevalue(f"{package}_native")
    inputs = _valid_inputs(package, batch=5)
    if "is_init" in inputs:
        inputs["is_init"] = torch.zeros_like(inputs["is_init"])  # so the state is read
    key = INPUTS[package][index][0]
    poisoned = inputs[key].clone()
    poisoned[0], poisoned[1], poisoned[2] = float("nan"), float("inf"), float("-inf")
    poisoned[3].view(-1)[0] = float("nan")
    inputs[key] = poisoned
    eager = _eager(policy, inputs)
    by_key = native(inputs)
    positional = native.run_positional(*inputs.values())
    for out_key, got in zip(native.manifest.output_keys, positional):
        td_key = tuple(out_key.split("."))
        want = eager[td_key]
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m, k=out_key: f"{k}: {m}")
        assert torch.equal(by_key[td_key].isnan(), got.isnan())
        assert got[0].isnan().any() or not want[0].isnan().any()
    assert any(out[0].isnan().any() for out in positional), "a NaN input row gave no NaN output"


def test_a_session_holds_a_nan_step_and_keeps_its_state(recurrent, recurrent_native):
    """The safety envelope: a NaN in any row holds the whole step (its outputs are the previous
    step's, zeros before the first: the package has no contract) and the state stays as it was."""
    policy, _, _ = recurrent
    session = recurrent_native.session(batch=3)
    hidden, is_init = torch.zeros(3, 8), torch.ones(3, 1, dtype=torch.bool)
    previous = {"action": torch.zeros(3, 2), ("next", "hidden"): torch.zeros(3, 8)}
    for step in range(4):
        observation = torch.randn(3, 3)
        if step in (0, 2):
            observation[step // 2, 1] = float("nan")
        out = session.step(observation=observation)
        if step in (0, 2):
            for key, want in previous.items():
                assert torch.equal(out[key], want), (step, key)
            continue
        expected = _eager(policy, {"observation": observation, "hidden": hidden, "is_init": is_init})
        torch.testing.assert_close(out["action"], expected["action"])
        torch.testing.assert_close(out["next", "hidden"], expected["next", "hidden"])
        previous = {key: out[key].clone() for key in previous}
        hidden, is_init = expected["next", "hidden"], torch.zeros_like(is_init)
    assert session.interventions == {
        "nonfinite": 2,
        "rate_limited": 0,
        "blended": 0,
        "clipped": 0,
        "fallback": 0,
    }


def test_a_misspelt_key_names_what_was_given_and_the_closest(tutorial_native):
    """Issue 38/39: a misspelt key (keyword, mapping or a TensorDict's) is named beside the key it
    most likely means, by the C++ validation and, for a TensorDict, by Python."""
    observation = torch.zeros(2, 3)
    hint = r"missing input key\(s\) 'observation' \(given: '{}'; did you mean 'observation' for '{}'\?\)"
    with pytest.raises(tdaot.MissingKeyError, match=hint.format("obsevation", "obsevation")):
        tutorial_native(obsevation=observation)
    with pytest.raises(tdaot.MissingKeyError, match=hint.format("obs", "obs")):
        tutorial_native(TensorDict({"obs": observation}, batch_size=[2]))
    unrelated = r"missing input key\(s\) 'observation' \(given: 'zzz'\); expected keys: observation"
    with pytest.raises(tdaot.MissingKeyError, match=unrelated):
        tutorial_native(TensorDict({"zzz": observation}, batch_size=[2]))
