import sys

if sys.argv[1:] == ["--cmake-prefix"]:
    # The C++ package's prefix for CMAKE_PREFIX_PATH, without the build side's imports (tdaot.cli).
    from tdaot._native import cmake_prefix

    try:
        print(cmake_prefix())
    except FileNotFoundError as e:
        sys.exit(f"tdaot: {e}")
    sys.exit(0)

from tdaot.cli import main  # noqa: E402 - only for the commands

sys.exit(main())
