"""The tdaot command line: build packages from policy factories, inspect them."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence

from tdaot.build import build
from tdaot.errors import TdaotError
from tdaot.export import INTERACTION_TYPES, BatchSpec
from tdaot.manifest import read_manifest


class CliError(Exception):
    """A usage problem reported as one line on stderr with exit code 2."""


def load_factory(spec: str):
    """Resolves "path/to/file.py:function" or "package.module:function"."""
    source, sep, name = spec.rpartition(":")
    if not sep or not source or not name.isidentifier():
        raise CliError(f"factory {spec!r} must look like FILE.py:FUNCTION or MODULE:FUNCTION")
    if source.endswith(".py") or os.sep in source:
        if not os.path.isfile(source):
            raise CliError(f"factory file {source!r} does not exist")
        module_name = f"_tdaot_factory_{abs(hash(os.path.abspath(source)))}"
        loader_spec = importlib.util.spec_from_file_location(module_name, source)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 - user code; reported with its own message
            raise CliError(f"importing {source!r} failed: {type(err).__name__}: {err}") from err
    else:
        try:
            module = importlib.import_module(source)
        except Exception as err:  # noqa: BLE001
            raise CliError(f"cannot import module {source!r}: {type(err).__name__}: {err}") from err
    factory = getattr(module, name, None)
    if not callable(factory):
        raise CliError(f"{source!r} has no callable {name!r}")
    return factory


def call_factory(spec: str):
    factory = load_factory(spec)
    try:
        result = factory()
    except Exception as err:  # noqa: BLE001
        raise CliError(f"factory {spec!r} raised {type(err).__name__}: {err}") from err
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CliError(
            f"factory {spec!r} must return (module, example_tensordict), got {type(result).__name__}"
        )
    return result


def parse_batch(text: str) -> BatchSpec:
    if text in ("dynamic", "static"):
        return text
    low, sep, high = text.partition(":")
    try:
        return (int(low), int(high)) if sep else int(low)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected dynamic, static, a batch size N, or MIN:MAX"
        ) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tdaot", description="Tensordict policies to native AOTInductor packages."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    b = commands.add_parser("build", help="export and compile a policy factory into a .pt2 package")
    b.add_argument("factory", help="FILE.py:FUNCTION or MODULE:FUNCTION returning (module, example_td)")
    b.add_argument("-o", "--output", required=True, help="package path (.pt2)")
    b.add_argument(
        "--out-key",
        action="append",
        dest="out_keys",
        metavar="KEY",
        help="an out key to export (repeatable; nested as a.b); default: the module's",
    )
    b.add_argument(
        "--batch", type=parse_batch, default="dynamic", help="dynamic (default), static, N, or MIN:MAX"
    )
    b.add_argument("--interaction-type", choices=INTERACTION_TYPES, default="deterministic")
    b.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    b.add_argument("--json", action="store_true", help="print the result as JSON")

    i = commands.add_parser("inspect", help="print a package's manifest")
    i.add_argument("package")
    i.add_argument("--json", action="store_true", help="print the manifest as JSON")
    return parser


def _build(args) -> None:
    module, example = call_factory(args.factory)
    out_keys = [tuple(k.split(".")) for k in args.out_keys] if args.out_keys else None
    artifact = build(
        module,
        example,
        args.output,
        out_keys=out_keys,
        batch=args.batch,
        interaction_type=args.interaction_type,
        device=args.device,
        factory=args.factory,
    )
    summary = {
        "path": artifact.path,
        "size_bytes": artifact.size_bytes,
        "export_seconds": round(artifact.export_seconds, 3),
        "compile_seconds": round(artifact.compile_seconds, 3),
    }
    if args.json:
        print(json.dumps({**summary, "manifest": artifact.manifest.to_dict()}, indent=2))
        return
    print(
        f"built {artifact.path} ({artifact.size_bytes / 1024:.0f} KiB) in "
        f"{artifact.export_seconds:.1f} s export + {artifact.compile_seconds:.1f} s compile"
    )
    print(artifact.manifest.describe())


def _inspect(args) -> None:
    manifest = read_manifest(args.package)
    print(manifest.to_json(indent=2) if args.json else manifest.describe())


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        {"build": _build, "inspect": _inspect}[args.command](args)
    except CliError as err:
        print(f"tdaot {args.command}: error: {err}", file=sys.stderr)
        return 2
    except TdaotError as err:
        print(f"tdaot {args.command}: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
