"""Inductor's compiles through ccache (tdaot.builder.compiler_cache): which commands go through it,
with what, and that a failing ccache never fails a compile. That ccache's objects make the bytes
a build without it makes is checked by test_reproducible (real compiles)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tdaot.builder import compiler_cache
from tdaot.builder.compiler_cache import ccache_command, ccache_program

COMPILE = ["g++", "/src/k.cpp", "-O3", "-march=native", "-c", "-o", "/src/k.o"]


@pytest.fixture
def root(tmp_path):
    folder = tmp_path / "root"
    folder.mkdir(mode=0o700)
    return str(folder)


@pytest.mark.parametrize(
    "argv",
    [
        ["g++", "/src/k.o", "/src/w.o", "-shared", "-o", "/src/m.so"],  # a link
        ["g++", "/tmp/x/header.hpp", "-E", "-P", "-o", "/tmp/x/header.i"],  # a header step
        ["g++", "/src/c.weights.S", "-c", "-o", "/src/c.weights.o"],  # the weights' assembly
    ],
    ids=["link", "header", "weights"],
)
def test_only_compiles_of_a_cpp_source_go_through_ccache(argv, root):
    assert ccache_command("/usr/bin/ccache", argv, root) is None


def test_a_compile_runs_under_ccache_with_its_settings_that_change_objects_overridden(root, monkeypatch):
    monkeypatch.setenv("CCACHE_NOHASHDIR", "1")
    monkeypatch.setenv("CCACHE_BASEDIR", "/src")
    monkeypatch.setenv("CCACHE_SLOPPINESS", "pch_defines,time_macros")
    argv, env = ccache_command("/usr/bin/ccache", ["g++", "/src/k.cpp", "-c", "-o", "/src/k.o"], root)
    assert argv == ["/usr/bin/ccache", "g++", "/src/k.cpp", "-c", "-o", "/src/k.o"]
    assert "CCACHE_NOHASHDIR" not in env
    assert (env["CCACHE_BASEDIR"], env["CCACHE_HASHDIR"], env["CCACHE_CPP2"]) == ("", "1", "1")
    assert env["CCACHE_SLOPPINESS"] == ""
    assert "CCACHE_PREFIX" not in env  # no precompiled header, nothing to swap


def test_a_precompiled_header_is_hashed_as_a_copy_and_compiled_as_itself(tmp_path, root, monkeypatch):
    monkeypatch.setenv("CCACHE_PREFIX", "distcc")
    header = tmp_path / "pch" / "c6abc.h"
    header.parent.mkdir()
    header.write_text("#include <vector>\n")
    (tmp_path / "pch" / "c6abc.h.gch").write_bytes(b"gch")
    argv, env = ccache_command("ccache", ["g++", "/src/w.cpp", "-include", str(header), "-c"], root)
    copy = os.path.join(root, "pch-free", "c6abc.h")
    assert argv == ["ccache", "g++", "/src/w.cpp", "-include", copy, "-c"]
    assert open(copy).read() == "#include <vector>\n" and not os.path.exists(copy + ".gch")
    script = os.path.join(root, "ccache-pch-restore.sh")
    assert env["CCACHE_PREFIX"] == f"{script} distcc"  # the user's prefix still runs, after ours
    assert (env["TDAOT_PCH_COPY"], env["TDAOT_PCH_HEADER"]) == (copy, str(header))
    # The prefix command gives the compiler the original header, every other argument as it was.
    shown = subprocess.run(
        [script, "printf", "%s\n", "-include", copy, "an argument with spaces", "-c"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown == ["-include", str(header), "an argument with spaces", "-c"]


def test_a_header_without_a_precompiled_one_is_left_alone(tmp_path, root):
    header = tmp_path / "plain.h"
    header.write_text("")
    argv, env = ccache_command("ccache", ["g++", "/src/w.cpp", "-include", str(header), "-c"], root)
    assert argv[1:] == ["g++", "/src/w.cpp", "-include", str(header), "-c"] and "CCACHE_PREFIX" not in env


def test_march_native_hashes_what_native_means_on_this_cpu(root, monkeypatch):
    monkeypatch.setenv("CCACHE_EXTRAFILES", "/etc/hostname")
    compiler_cache._native_meaning.cache_clear()
    _, env = ccache_command("ccache", COMPILE, root)
    mine, native = env["CCACHE_EXTRAFILES"].split(os.pathsep)
    assert mine == "/etc/hostname"
    expected = subprocess.run(["g++", "-march=native", "-Q", "--help=target"], capture_output=True).stdout
    assert open(native, "rb").read() == expected and b"-march=" in expected


def test_march_native_with_a_compiler_that_cannot_say_what_it_means_skips_ccache(tmp_path, root):
    compiler = tmp_path / "cc-without-help"
    compiler.write_text("#!/bin/sh\nexit 1\n")
    compiler.chmod(0o755)
    compiler_cache._native_meaning.cache_clear()
    assert ccache_command("ccache", [str(compiler), *COMPILE[1:]], root) is None


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_tdaot_ccache_0_turns_it_off(value, monkeypatch):
    monkeypatch.setenv("TDAOT_CCACHE", value)
    assert ccache_program() is None


def test_ccache_is_used_where_it_is_on_path(tmp_path, monkeypatch):
    fake = tmp_path / "ccache"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("TDAOT_CCACHE", raising=False)
    assert ccache_program() == str(fake)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ccache_program() is None


@pytest.mark.parametrize("exit_code, plain_runs", [(0, 0), (1, 1)], ids=["ccache-succeeds", "ccache-fails"])
def test_a_failing_ccache_run_is_run_again_without_it(exit_code, plain_runs, tmp_path, root):
    fake = tmp_path / "ccache"
    fake.write_text(f'#!/bin/sh\necho ran "$@" >> {tmp_path / "log"}\nexit {exit_code}\n')
    fake.chmod(0o755)
    plain = []
    compiler_cache._run(
        str(fake), root, "true /src/k.cpp -c -o /src/k.o", str(tmp_path), lambda *a: plain.append(a)
    )
    assert (tmp_path / "log").read_text() == "ran true /src/k.cpp -c -o /src/k.o\n"
    assert plain == [("true /src/k.cpp -c -o /src/k.o", str(tmp_path))] * plain_runs


def test_without_a_private_folder_for_its_files_compiles_run_as_they_are(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    from torch._inductor import cpp_builder

    before = cpp_builder._run_compile_cmd
    with compiler_cache.compiles_through_ccache(str(shared)):
        assert cpp_builder._run_compile_cmd is before
    with compiler_cache.compiles_through_ccache(str(tmp_path / "private")):
        assert (cpp_builder._run_compile_cmd is before) == (ccache_program() is None)
    assert cpp_builder._run_compile_cmd is before  # restored
