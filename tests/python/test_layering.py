"""Layering: the runtime side (loading, running, sessions) imports nothing from the build side,
and `import tdaot` imports neither torch nor a build module until a name needs them."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

import tdaot
from tdaot.errors import CliError, ConfigError, FactoryError, TdaotError, UsageError, exit_code

# Build-side modules: none may be imported by loading and running a package.
BUILD_SIDE = ("tdaot.builder", "tdaot._torch_compat", "tdaot.testing", "tdaot.cli", "torch._inductor.codegen")
BUILD_NAMES = ("export", "compile", "tuning", "pipeline", "builder", "rewrites")


def _modules_after(code: str) -> list[str]:
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


@functools.cache
def _before_tdaot() -> frozenset[str]:
    """What `import torch, tensordict` imports by itself: not tdaot's doing. On torch 2.15,
    tensordict's import of torch._dynamo brings torch._inductor and its codegen along."""
    return frozenset(_modules_after("import torch, tensordict"))


def _build_side(modules: list[str]) -> list[str]:
    return [
        m
        for m in modules
        if (m.startswith(BUILD_SIDE) or (m.startswith("tdaot.") and m.rsplit(".", 1)[-1] in BUILD_NAMES))
        and m not in _before_tdaot()
    ]


def test_import_tdaot_imports_neither_torch_nor_a_build_module():
    # The `tdaot` command's build memo replays a build on this (tdaot.build_memo).
    modules = _modules_after("import tdaot")
    assert not [m for m in modules if m.split(".")[0] in ("torch", "tensordict")]
    assert "tdaot.runtime" not in modules
    modules = _modules_after("import tdaot\ntdaot.Policy")
    assert "tdaot.runtime" in modules
    assert _build_side(modules) == []


def test_loading_and_running_imports_no_build_module(tutorial):
    path = tutorial[2].path
    modules = _modules_after(
        "import torch, tdaot.runtime\n"
        f"native = tdaot.load({path!r})\n"
        "native.run_positional(torch.zeros(1, 3))\n"
        "native(observation=torch.zeros(2, 3))\n"
        "str(native.manifest.describe())\n"
    )
    assert "tdaot._C" in modules
    assert _build_side(modules) == []


def test_build_names_import_the_builder_on_first_use():
    modules = _modules_after("import tdaot\ntdaot.build\ntdaot.BuildOptions")
    assert "tdaot.builder.pipeline" in modules and "tdaot.builder.options" in modules


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'bulid'"):
        tdaot.bulid  # noqa: B018


@pytest.mark.parametrize("cls", [CliError, ConfigError, FactoryError])
def test_usage_errors_are_tdaot_errors_with_exit_code_2(cls):
    assert issubclass(cls, TdaotError) and issubclass(cls, UsageError)
    assert exit_code(cls("x")) == 2


def test_every_exported_error_is_a_tdaot_error_and_other_errors_exit_1():
    for name in tdaot.errors.__all__:
        cls = getattr(tdaot, name)
        if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, Warning):
            assert issubclass(cls, TdaotError), name
    assert exit_code(tdaot.ExportError("x")) == 1 and exit_code(tdaot.DtypeError("x")) == 1
    assert exit_code(ValueError("x")) == 1
    assert issubclass(ConfigError, tdaot.BuildError) and issubclass(FactoryError, tdaot.BuildError)


def test_the_runtimes_own_invariants_are_internal_errors_apart_from_caller_errors():
    """The C++ runtime throws a broken invariant of its own as tdaot::Error("internal: ...") (or
    an InternalError class); the bindings raise it as TdaotError(message), which is made an
    InternalError. A caller's misuse is an InvalidArgumentError, exported at the top level."""
    with pytest.raises(tdaot.InternalError, match="internal: carry buffers filled rows without a mask"):
        raise TdaotError("internal: carry buffers filled rows without a mask")
    assert type(TdaotError("a plain failure")) is TdaotError
    assert type(tdaot.PackageError("internal: not a runtime invariant", "p.pt2")) is tdaot.PackageError
    assert issubclass(tdaot.InternalError, TdaotError) and not issubclass(
        tdaot.InternalError, tdaot.InputError
    )
    assert tdaot.InvalidArgumentError is tdaot.errors.InvalidArgumentError
    assert issubclass(tdaot.BoundKeyError, tdaot.InvalidArgumentError) and issubclass(
        tdaot.BoundKeyError, KeyError
    )
    assert issubclass(tdaot.TorchMismatchError, TdaotError) and issubclass(
        tdaot.TorchMismatchError, ImportError
    )
