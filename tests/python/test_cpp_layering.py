"""Layering of the C++ tree, read from the sources (no compile): public headers include only
public headers and declare none of the internal names; the torch-free parts (the core, the lite
runtime, the public headers the lite runtime exposes) include no torch, ATen or c10 header; the
core includes nothing of either runtime. The folder names are the architecture
(docs/architecture.md): a rule broken here is a dependency that goes the wrong way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPP = ROOT / "cpp"
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)
TORCH = re.compile(r"^(torch|ATen|c10)/")
# What belongs to one of the two runtimes, never to the core they share.
RUNTIME_INCLUDES = (
    "runtime/",
    "lite/",
    "tdaot/lite.h",
    "tdaot/torch/",
)


def includes(path: Path) -> list[tuple[str, str]]:
    return INCLUDE.findall(path.read_text())


def sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in (".h", ".cpp"))


def public_closure(header: str) -> set[str]:
    """The public headers `header` reaches through its own "tdaot/..." includes."""
    seen, todo = set(), [header]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [inc for kind, inc in includes(CPP / "include" / name) if inc.startswith("tdaot/")]
    return seen


def test_public_headers_include_only_public_headers():
    bad = [
        f"{header.name}: {inc}"
        for header in sources(CPP / "include" / "tdaot")
        for kind, inc in includes(header)
        if kind == '"' and not (inc.startswith("tdaot/") and (CPP / "include" / inc).is_file())
    ]
    assert bad == []


# What only the package reader, the build stage (through tdaot._C), the runtimes' messages and
# the tools use: declared in internal headers (cpp/src/core/manifest/*_internal.h), never in
# the public API a service includes.
INTERNAL_NAMES = (
    "kBookkeepingRecords",
    "kSignatureEntry",
    "digest_exempt",
    "Sealing",
    "parse_manifest",
    "format_shape",
    "format_batched_shape",
    "dtype_names",
    "order_names",
)


def declared(name: str, text: str) -> bool:
    """Whether `text` names `name` outside comments (a declaration, a default argument...)."""
    code = re.sub(r"//[^\n]*", "", text)
    return re.search(rf"\b{name}\b", code) is not None


def test_public_headers_declare_no_internal_name():
    bad = [
        f"{header.name}: {name}"
        for header in sources(CPP / "include" / "tdaot")
        for name in INTERNAL_NAMES
        if declared(name, header.read_text())
    ]
    assert bad == []
    internal = (CPP / "src" / "core" / "manifest" / "manifest_internal.h").read_text()
    assert declared("format_shape", internal)  # the check finds a declaration
    assert not declared("format_shape", "// format_shape in a comment\n")


@pytest.mark.parametrize("folder", ["src/core", "src/lite", "tools/tdaot_lite"])
def test_torch_free_parts_include_no_torch(folder):
    bad = [
        f"{path.relative_to(CPP)}: {inc}"
        for path in sources(CPP / folder)
        for _, inc in includes(path)
        if TORCH.match(inc)
    ]
    assert bad == []


def test_lite_header_reaches_no_torch_header():
    closure = public_closure("tdaot/lite.h")
    assert "tdaot/manifest.h" in closure  # the check follows includes
    headers = CPP / "include"
    bad = [f"{name}: {inc}" for name in closure for _, inc in includes(headers / name) if TORCH.match(inc)]
    assert bad == []


def test_only_the_torch_folder_reaches_torch():
    # The naming rule of the public headers: what needs libtorch is under tdaot/torch/, and every
    # other header (the core surface at the top, the robot helpers in tdaot/service/) is
    # torch-free through its whole include closure.
    headers = CPP / "include"
    free = [
        str(path.relative_to(headers)) for path in sources(headers / "tdaot") if path.parent.name != "torch"
    ]
    assert "tdaot/lite.h" in free and "tdaot/service/terms.h" in free
    bad = [
        f"{name}: {inc}"
        for header in free
        for name in public_closure(header)
        for _, inc in includes(headers / name)
        if TORCH.match(inc)
    ]
    assert bad == []
    # One path per header: what needs libtorch only under tdaot/torch/, no forwarding header left.
    top = {p.name for p in (headers / "tdaot").glob("*.h")}
    assert not top & {p.name for p in (headers / "tdaot" / "torch").glob("*.h")}


def test_core_includes_neither_runtime():
    bad = [
        f"{path.relative_to(CPP)}: {inc}"
        for path in sources(CPP / "src" / "core")
        for _, inc in includes(path)
        if inc.startswith(RUNTIME_INCLUDES)
    ]
    assert bad == []


def test_a_torch_include_in_the_core_is_caught(tmp_path):
    # The rule's own check: a file like this one would be reported.
    fake = tmp_path / "x.cpp"
    fake.write_text('#include <ATen/Tensor.h>\n#include "core/package/package.h"\n')
    assert [inc for _, inc in includes(fake) if TORCH.match(inc)] == ["ATen/Tensor.h"]
