"""The tdaot command line: build packages (one factory, or a config of many), inspect
them, and merge the reports of sharded CI builds."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence

from tdaot.build import build, exported_program_path
from tdaot.config import ConfigError, load_config
from tdaot.errors import TdaotError
from tdaot.export import INTERACTION_TYPES, BatchSpec
from tdaot.factories import FactoryError, call_factory
from tdaot.manifest import read_manifest
from tdaot.targets import CPU_TARGETS
from tdaot.tuning import DEFAULT_TUNING, TUNINGS


class CliError(Exception):
    """A usage problem reported as one line on stderr with exit code 2."""


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

    b = commands.add_parser(
        "build", help="export and compile a policy factory (or a config of many) into .pt2"
    )
    b.add_argument(
        "factory", nargs="?", help="FILE.py:FUNCTION or MODULE:FUNCTION returning (module, example_td)"
    )
    b.add_argument("-o", "--output", help="package path (.pt2), with a factory")
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
    b.add_argument("--cpu-target", default="native", choices=tuple(CPU_TARGETS))
    b.add_argument(
        "--kernel-threads",
        type=int,
        default=1,
        metavar="N",
        help="OpenMP threads compiled into the kernels: 1 (default, serial), N, or 0 (decided at run time)",
    )
    b.add_argument(
        "--tuning",
        choices=TUNINGS,
        default=DEFAULT_TUNING,
        help="throughput (default: ATen's GEMM and RNN kernels) or latency (inductor's C++ GEMM "
        "template, recurrent layers decomposed: faster at batch 1, slower at large batch)",
    )
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.add_argument(
        "--save-exported",
        action="store_true",
        help="also write the torch.export program beside it (NAME.ep.pt2)",
    )
    many = b.add_argument_group("config builds")
    many.add_argument("--config", help="tdaot.toml, or a pyproject.toml with [tool.tdaot]")
    many.add_argument("--jobs", type=int, default=1, help="parallel build processes")
    many.add_argument("--shard", metavar="I/N", help="build only shard I of N (stable, covers the list once)")
    many.add_argument("--no-cache", action="store_true", help="compile even when the cache has the artifact")
    many.add_argument("--cache-dir", help="cache directory (default $TDAOT_CACHE_DIR or ~/.cache/tdaot)")
    many.add_argument("--no-parity", action="store_true", help="skip the parity check after each build")
    many.add_argument(
        "--check-reproducible", action="store_true", help="build each artifact twice more and compare bytes"
    )
    many.add_argument("--report", metavar="JSON", help="write the JSON report here")
    many.add_argument("--junit", metavar="XML", help="write a JUnit XML report here")

    i = commands.add_parser("inspect", help="print a package's manifest")
    i.add_argument("package")
    i.add_argument("--json", action="store_true", help="print the manifest as JSON")
    i.add_argument(
        "--graph",
        action="store_true",
        help="print the exported graph (needs NAME.ep.pt2 from --save-exported)",
    )

    v = commands.add_parser(
        "verify", help="check a package's files against its manifest's sha256 digests (loads nothing)"
    )
    v.add_argument("package")
    v.add_argument("--sha256", help="also require the whole package to have this sha256 (pinning)")

    r = commands.add_parser("report", help="work with build reports")
    r_commands = r.add_subparsers(dest="report_command", required=True)
    m = r_commands.add_parser("merge", help="join the JSON reports of sharded builds")
    m.add_argument("reports", nargs="+")
    m.add_argument("-o", "--output", required=True, help="merged JSON report")
    m.add_argument("--junit", metavar="XML", help="also write a JUnit XML report")
    return parser


def _build(args) -> int:
    if args.config:
        if args.factory or args.output:
            raise CliError("give either a factory with -o, or --config, not both")
        return _build_config(args)
    if not args.factory or not args.output:
        raise CliError("give a factory and -o OUTPUT.pt2, or --config FILE")
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
        cpu_target=args.cpu_target,
        factory=args.factory,
        save_exported=args.save_exported,
        kernel_threads=args.kernel_threads,
        tuning=args.tuning,
    )
    summary = {
        "path": artifact.path,
        "exported_path": artifact.exported_path,
        "size_bytes": artifact.size_bytes,
        "sha256": artifact.sha256,
        "export_seconds": round(artifact.export_seconds, 3),
        "compile_seconds": round(artifact.compile_seconds, 3),
    }
    if args.json:
        print(json.dumps({**summary, "manifest": artifact.manifest.to_dict()}, indent=2))
        return 0
    print(
        f"built {artifact.path} ({artifact.size_bytes / 1024:.0f} KiB) in "
        f"{artifact.export_seconds:.1f} s export + {artifact.compile_seconds:.1f} s compile"
    )
    print(f"sha256 {artifact.sha256} (pin it: tdaot.load(..., expected_sha256=...))")
    if artifact.exported_path:
        print(f"exported program: {artifact.exported_path}")
    print(artifact.manifest.describe())
    return 0


def _build_config(args) -> int:
    # Imported here: the pipeline pulls in multiprocessing and the parity checker.
    from tdaot.pipeline import build_all, select_shard
    from tdaot.progress import Progress
    from tdaot.report import summary, write_json, write_junit

    specs = select_shard(load_config(args.config), args.shard)
    if args.no_parity:
        specs = [dataclasses.replace(spec, parity=False) for spec in specs]
    progress = Progress([spec.id for spec in specs])
    results = build_all(
        specs,
        progress,
        jobs=args.jobs,
        cache_dir=args.cache_dir,
        use_cache=not args.no_cache,
        check_reproducible=args.check_reproducible,
    )
    if args.report:
        write_json(args.report, results, shard=args.shard)
    if args.junit:
        write_junit(args.junit, results)
    counts = summary(results)
    print(f"tdaot: {counts['built']} built, {counts['cached']} cached, {counts['failed']} failed")
    failed = [r for r in results if r.failed]
    for result in failed:
        print(f"tdaot: {result.id} failed: {result.error}", file=sys.stderr)
    return 1 if failed else 0


def _inspect(args) -> int:
    if args.graph:
        print(exported_graph(args.package))
        return 0
    manifest = read_manifest(args.package)
    print(manifest.to_json(indent=2) if args.json else manifest.describe())
    return 0


def _verify(args) -> int:
    from tdaot.runtime import verify

    digest = verify(args.package, args.sha256)
    files = len(read_manifest(args.package).files)
    pinned = "; the package matches --sha256" if args.sha256 else ""
    print(f"{args.package}: {files} files match their sha256 digests{pinned}\nsha256 {digest}")
    return 0


def exported_graph(package: str) -> str:
    """The readable form of the torch.export program saved beside ``package`` (or given directly)."""
    import torch

    path = package if package.endswith(".ep.pt2") else exported_program_path(package)
    if not os.path.isfile(path):
        raise CliError(
            f"no exported program {path!r} beside {package!r}: rebuild with `tdaot build ... --save-exported`"
        )
    try:
        program = torch.export.load(path)
    except Exception as err:  # noqa: BLE001 - any unreadable file is reported the same way
        raise CliError(f"{path!r} is not a torch.export program: {type(err).__name__}: {err}") from err
    return program.graph_module.print_readable(print_output=False, include_stride=False, colored=False)


def _report(args) -> int:
    from tdaot.report import merge, summary, write_json, write_junit

    results = merge(args.reports)
    write_json(args.output, results, shard=None)
    if args.junit:
        write_junit(args.junit, results)
    counts = summary(results)
    print(f"merged {len(args.reports)} reports: {counts['total']} artifacts, {counts['failed']} failed")
    return 1 if counts["failed"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        commands = {"build": _build, "inspect": _inspect, "verify": _verify, "report": _report}
        return commands[args.command](args)
    except (CliError, FactoryError, ConfigError) as err:
        print(f"tdaot {args.command}: error: {err}", file=sys.stderr)
        return 2
    except TdaotError as err:
        print(f"tdaot {args.command}: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
