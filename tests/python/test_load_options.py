"""The load options have one definition, tdaot::PolicyOptions in C++: the binding's defaults
(tdaot._C.Policy), tdaot.load's and the stub's (_C.pyi) are checked against the
defaults the extension reads from a default-constructed PolicyOptions
(_C.load_option_defaults). A field added in C++ stops the extension's build until it is bound
(module.cpp's PolicyOptionsFields), and these tests until Python has it. Nothing is loaded."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import tdaot
from tdaot import _C

CPP = _C.load_option_defaults()
# C++ only: from Python a CUDA package loads on torch's current device.
CPP_ONLY = {"device_index"}
STUB = Path(tdaot.__file__).with_name("_C.pyi")


def python_default(name: str, cpp_default):
    """What tdaot.load writes for the C++ default: None for an empty string, () for an empty
    list, and None for intra_op_threads (the binding's PYTHON_INTRA_OP_THREADS)."""
    if name == "intra_op_threads" or cpp_default == "":
        return None
    if cpp_default == []:
        return ()
    return cpp_default


def keyword_defaults(function) -> dict:
    return {
        name: p.default
        for name, p in inspect.signature(function).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def binding_defaults() -> dict:
    """_C.Policy's keyword defaults, from the signature pybind11 writes in its docstring."""
    line = _C.Policy.__init__.__doc__.strip().splitlines()[0]
    params = line[line.index("(") + 1 : line.rindex(") ->")]
    function = ast.parse(f"def f({params}): pass").body[0]
    return {
        arg.arg: ast.literal_eval(default)
        for arg, default in zip(function.args.kwonlyargs, function.args.kw_defaults, strict=True)
    }


def stub_defaults() -> dict:
    tree = ast.parse(STUB.read_text())
    policy = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Policy")
    init = next(n for n in policy.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return {
        arg.arg: ast.literal_eval(default)
        for arg, default in zip(init.args.kwonlyargs, init.args.kw_defaults, strict=True)
    }


def test_the_cpp_definition_is_read():
    assert CPP["num_runners"] == 1 and CPP["max_package_bytes"] == 4 << 30
    assert CPP["intra_op_threads"] == 1  # a control loop's default; Python's is below
    assert _C.PYTHON_INTRA_OP_THREADS == 0  # PolicyOptions: 0 leaves torch's setting alone


def test_the_binding_takes_every_field_with_its_cpp_default():
    expected = {name: value for name, value in CPP.items() if name not in CPP_ONLY}
    expected["intra_op_threads"] = _C.PYTHON_INTRA_OP_THREADS
    assert binding_defaults() == expected


def test_the_stub_writes_the_bindings_defaults():
    assert stub_defaults() == binding_defaults()


def test_tdaot_load_takes_every_field_with_the_cpp_default():
    expected = {name: python_default(name, value) for name, value in CPP.items() if name not in CPP_ONLY}
    assert keyword_defaults(tdaot.load) == expected


def test_the_load_options_are_tdaot_loads_alone():
    """One door: tdaot.Policy (which tdaot.load returns) repeats none of load's keywords; it wraps
    a loaded package, and options given to it are refused towards tdaot.load (test_policy_module)."""
    parameters = inspect.signature(tdaot.Policy.__init__).parameters
    assert [(p.name, p.kind) for p in parameters.values()] == [
        ("self", inspect.Parameter.POSITIONAL_ONLY),
        ("loaded", inspect.Parameter.POSITIONAL_ONLY),
        ("options", inspect.Parameter.VAR_KEYWORD),
    ]
