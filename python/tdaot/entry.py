"""The `tdaot` command (and `python -m tdaot`): `--cmake-prefix`, and the build memo's replay
(tdaot.build_memo), both before anything imports torch; then the command line, tdaot.cli."""

from __future__ import annotations

import sys

from tdaot import build_memo


def main() -> int:
    argv = sys.argv[1:]
    if argv == ["--cmake-prefix"]:
        # The C++ package's prefix for CMAKE_PREFIX_PATH, without the build side's imports.
        from tdaot._native import cmake_prefix

        try:
            print(cmake_prefix())
        except FileNotFoundError as e:
            sys.exit(f"tdaot: {e}")
        return 0
    memo = None
    if build_memo.applies(argv):
        printed = build_memo.replay(argv)
        if printed is not None:
            print(printed, end="")
            return 0
        memo = build_memo.Recorder(argv)
    from tdaot.cli import main as command_line

    return command_line(argv, memo=memo)
