"""The C++ error classes (cpp/include/tdaot/errors.h), the Python classes of the same names
(tdaot.errors) and the C++ -> Python translation (cpp/python/module.cpp) agree: every C++ class
has its Python twin with the twin of its C++ base, the translator catches every class, and it
catches each class before its bases (a base caught first would swallow the derived class)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tdaot.errors

ROOT = Path(__file__).resolve().parents[2]
ERRORS_H = (ROOT / "cpp" / "include" / "tdaot" / "errors.h").read_text()
MODULE_CPP = (ROOT / "cpp" / "python" / "module.cpp").read_text()

# class Derived : public Base
CPP_CLASSES = dict(re.findall(r"^class (\w+) : public (?:std::)?(\w+)", ERRORS_H, re.MULTILINE))
CATCH_ORDER = re.findall(r"catch \(const tdaot::(\w+)&", MODULE_CPP)
RAISED = dict(re.findall(r"catch \(const tdaot::(\w+)&[^}]*?(?:raise_python\(|attr\()\"(\w+)\"", MODULE_CPP))
PYTHON_NAME = {"Error": "TdaotError"}  # the one class named differently


def python_name(cpp_name: str) -> str:
    return PYTHON_NAME.get(cpp_name, cpp_name)


def test_the_sources_were_read():
    assert CPP_CLASSES["Error"] == "runtime_error"
    assert {"PackageError", "InvalidArgumentError", "ExecutionError"} <= set(CPP_CLASSES)
    assert CATCH_ORDER[-1] == "Error"


@pytest.mark.parametrize("cpp_name", sorted(CPP_CLASSES))
def test_every_cpp_class_has_its_python_twin_with_the_same_base(cpp_name):
    twin = getattr(tdaot.errors, python_name(cpp_name), None)
    assert twin is not None, f"tdaot.errors has no {python_name(cpp_name)}"
    base = CPP_CLASSES[cpp_name]
    if base != "runtime_error":
        assert issubclass(twin, getattr(tdaot.errors, python_name(base)))


@pytest.mark.parametrize("cpp_name", sorted(CPP_CLASSES))
def test_the_translator_raises_the_twin(cpp_name):
    assert cpp_name in CATCH_ORDER, f"module.cpp does not catch tdaot::{cpp_name}"
    assert RAISED[cpp_name] == python_name(cpp_name)


def test_the_translator_catches_derived_classes_before_their_bases():
    position = {name: i for i, name in enumerate(CATCH_ORDER)}
    for name in CPP_CLASSES:
        base = CPP_CLASSES[name]
        while base in CPP_CLASSES:
            assert position[name] < position[base], f"{name} is caught after its base {base}"
            base = CPP_CLASSES[base]
