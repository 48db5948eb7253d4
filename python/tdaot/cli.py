"""The tdaot command line: build packages (one factory, or a config of many), inspect
them, merge the reports of sharded CI builds, and replay, show and export flight logs."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence

from tdaot.builder import BuildOptions, build, exported_program_path
from tdaot.builder.config import load_config
from tdaot.builder.factories import call_factory
from tdaot.builder.options import fields as option_fields
from tdaot.cli_trained import leapp_inputs, run_inputs
from tdaot.errors import CliError, TdaotError, exit_code
from tdaot.flight_log.command import add_parsers as add_flight_log_parsers
from tdaot.flight_log.command import log_command, replay_command
from tdaot.manifest import read_manifest
from tdaot.rehearse.command import add_parser as add_rehearse_parser
from tdaot.rehearse.command import run as rehearse


def _add_option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per BuildOptions field: its name, choices and help come from the field; an
    absent flag leaves the field's default to BuildOptions."""
    for spec in option_fields():
        meta = spec.metadata
        flag = meta["cli_flag"] or "--" + spec.name.replace("_", "-")
        help_text = f"{meta['doc']} (default: {meta['shown_default'] or spec.default})"
        kwargs: dict = {"dest": spec.name, "default": None, "help": help_text}
        if spec.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", **kwargs)
            continue
        if meta["from_text"] is not None:
            kwargs["type"] = _argument_type(meta["from_text"])
        kwargs["choices"] = meta["choices"] or None
        if meta["metavar"]:
            kwargs["metavar"] = meta["metavar"]
        if spec.name == "out_keys":
            kwargs.update(action="append", help=f"{meta['doc']} (repeatable)")
        parser.add_argument(flag, **kwargs)


def _argument_type(parse):
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _sha256_digest(text: str) -> str:
    """A sha256 as --sha256 takes it: 64 hex digits (any case), returned in lower case."""
    if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a sha256 digest (64 hex digits, as `sha256sum` or `tdaot build` prints it)"
        )
    return text.lower()


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
    b.add_argument("-o", "--output", help="package path (.pt2), with a factory, --rsl-rl or --run")
    _add_option_flags(b)
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    trained = b.add_argument_group(
        "trained runs (rsl_rl, skrl, rl_games, Stable-Baselines3; instead of a factory)"
    )
    runs = trained.add_mutually_exclusive_group()
    runs.add_argument(
        "--rsl-rl",
        metavar="RUN_DIR",
        help="an rsl_rl run directory (model_<iter>.pt beside params/agent.yaml): its actor, and the "
        "contract of params/deploy.yaml when there is one",
    )
    runs.add_argument(
        "--run",
        metavar="PATH",
        help="a run directory or checkpoint of rsl_rl, skrl, rl_games or Stable-Baselines3: which library "
        "wrote it is recognised from its files and said (tdaot.from_run)",
    )
    runs.add_argument(
        "--leapp",
        metavar="BUNDLE.yaml",
        help="an NVIDIA LEAPP bundle's YAML: its pt2 node compiled, its kinds, names, gains and frequency "
        "the contract (tdaot.from_leapp); batch static (LEAPP traces batch 1) unless --batch says",
    )
    trained.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="the checkpoint to build (a file or an iteration; default: newest)",
    )
    trained.add_argument(
        "--deploy",
        metavar="FILE",
        help="the deployment file the contract comes from (deploy.yaml, or an mjlab ONNX export); "
        "default: RUN_DIR/params/deploy.yaml when present",
    )
    joints = trained.add_mutually_exclusive_group()
    joints.add_argument(
        "--mjcf", metavar="FILE", help="the robot's MJCF: its actuated joints give the joint order"
    )
    joints.add_argument("--joint-names", metavar="A,B,...", help="the robot's joint order, comma-separated")
    trained.add_argument(
        "--no-supervisor",
        action="store_true",
        help="leave the default supervisor of the joint targets (0.1 s soft start, the MJCF's joint "
        "ranges as limits, the damp fallback) out of the deployment file's contract",
    )
    b.add_argument("--no-cache", action="store_true", help="compile even when the cache has the artifact")
    b.add_argument(
        "--cache-dir",
        help="artifact cache directory (default: $TDAOT_CACHE_DIR, else $XDG_CACHE_HOME/tdaot, else "
        "~/.cache/tdaot)",
    )
    many = b.add_argument_group("config builds")
    many.add_argument("--config", help="tdaot.toml, or a pyproject.toml with [tool.tdaot]")
    many.add_argument("--jobs", type=int, default=1, help="parallel build processes")
    many.add_argument("--shard", metavar="I/N", help="build only shard I of N (stable, covers the list once)")
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
        "--leapp",
        action="store_true",
        help="print the package's contract as an NVIDIA LEAPP YAML (models, pipeline)",
    )
    i.add_argument(
        "--graph",
        action="store_true",
        help="print the exported graph (needs NAME.ep.pt2 from --save-exported)",
    )

    v = commands.add_parser(
        "verify",
        help="check a package's files against its manifest's sha256 digests, or a weight file's "
        "tensors against its digests (loads nothing)",
    )
    v.add_argument("package", metavar="FILE", help="a .pt2 package or a .tdw weight file")
    v.add_argument(
        "--sha256",
        type=_sha256_digest,
        help="also require the whole package to have this sha256 (pinning; 64 hex digits)",
    )
    v.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="PUB.pem",
        help="also require a valid signature by this trusted Ed25519 public key (repeatable: any one)",
    )

    k = commands.add_parser("keygen", help="write a new Ed25519 signing key pair (private.pem, public.pem)")
    k.add_argument(
        "--out", required=True, metavar="DIR", help="directory for the key pair (created if needed)"
    )

    s = commands.add_parser(
        "sign", help="sign a package's manifest or a weight file's digests (adds its signature entry)"
    )
    s.add_argument("package", metavar="FILE", help="a .pt2 package or a .tdw weight file")
    s.add_argument("--key", required=True, metavar="KEY.pem", help="the Ed25519 private key (tdaot keygen)")

    add_rehearse_parser(commands)
    add_flight_log_parsers(commands)

    r = commands.add_parser("report", help="work with build reports")
    r_commands = r.add_subparsers(dest="report_command", required=True)
    m = r_commands.add_parser("merge", help="join the JSON reports of sharded builds")
    m.add_argument("reports", nargs="+")
    m.add_argument("-o", "--output", required=True, help="merged JSON report")
    m.add_argument("--junit", metavar="XML", help="also write a JUnit XML report")
    return parser


_RUN_FLAGS = ("checkpoint", "deploy", "mjcf", "joint_names")


def _build(args, memo=None) -> int:
    given_run_flags = [
        f"--{name.replace('_', '-')}" for name in _RUN_FLAGS if getattr(args, name) is not None
    ]
    run_flag = (
        "--rsl-rl RUN_DIR"
        if args.rsl_rl
        else "--run PATH"
        if args.run
        else "--leapp BUNDLE"
        if args.leapp
        else None
    )
    if run_flag is None and given_run_flags:
        raise CliError(f"{', '.join(given_run_flags)} belong to --rsl-rl RUN_DIR builds (or --run PATH)")
    if args.config:
        if run_flag:
            raise CliError(f"give either {run_flag} with -o, or --config, not both")
        if args.factory or args.output:
            raise CliError("give either a factory with -o, or --config, not both")
        return _build_config(args)
    if args.factory and run_flag:
        raise CliError(f"give either a factory or {run_flag}, not both")
    if run_flag and not args.output:
        raise CliError(f"{run_flag} needs -o OUTPUT.pt2")
    if not run_flag and (not args.factory or not args.output):
        raise CliError(
            "give a factory and -o OUTPUT.pt2, or --rsl-rl RUN_DIR or --run PATH and -o, or --config FILE"
        )
    given = {spec.name: getattr(args, spec.name) for spec in option_fields()}
    options = BuildOptions(**{name: value for name, value in given.items() if value is not None})
    if args.leapp:
        module, example, options = leapp_inputs(args, options, batch_given=given["batch"] is not None)
    elif run_flag:
        module, example, options = run_inputs(args, options)
    else:
        module, example = call_factory(args.factory)
    cache = False if args.no_cache else (args.cache_dir or True)
    artifact = build(module, example, args.output, factory=args.factory, cache=cache, **options.as_kwargs())
    summary = {
        "path": artifact.path,
        "exported_path": artifact.exported_path,
        "size_bytes": artifact.size_bytes,
        "sha256": artifact.sha256,
        "signed_by": artifact.signed_by,
        "export_seconds": round(artifact.export_seconds, 3),
        "compile_seconds": round(artifact.compile_seconds, 3),
        "cache_hit": artifact.cache_hit,
    }
    if args.json:
        print(_json_summary(summary, artifact.manifest), end="")
    else:
        compiled = "from the cache" if artifact.cache_hit else "compile"
        took = f"in {artifact.export_seconds:.1f} s export + {artifact.compile_seconds:.1f} s {compiled}"
        print(_built_line(artifact, took))
        print(_summary_lines(artifact), end="")
    if memo is not None:
        outputs = [path for path in (artifact.path, artifact.exported_path) if path]
        memo.built(outputs, _replayed(args, summary, artifact))
    return 0


def _json_summary(summary: dict, manifest) -> str:
    return json.dumps({**summary, "manifest": manifest.to_dict()}, indent=2) + "\n"


def _summary_lines(artifact) -> str:
    """What `tdaot build` prints after its first line: the digest to pin, the signer, the exported
    program and the manifest."""
    lines = [f"sha256 {artifact.sha256} (pin it: tdaot.load(..., expected_sha256=...))"]
    if artifact.signed_by:
        lines.append(f"signed with key {artifact.signed_by}")
    if artifact.exported_path:
        lines.append(f"exported program: {artifact.exported_path}")
    lines.append(artifact.manifest.describe())
    return "\n".join(lines) + "\n"


def _replayed(args, summary: dict, artifact) -> str:
    """What the same command prints when the build memo replays this build (tdaot.build_memo)."""
    if args.json:
        summary = {**summary, "export_seconds": 0.0, "compile_seconds": 0.0, "cache_hit": True, "memo": True}
        return _json_summary(summary, artifact.manifest)
    first = _built_line(
        artifact,
        "from the build memo: the factory, its modules and the files it read are unchanged since the "
        "last build (--no-cache builds anew)",
    )
    return first + "\n" + _summary_lines(artifact)


def _built_line(artifact, how: str) -> str:
    return f"built {artifact.path} ({artifact.size_bytes / 1024:.0f} KiB) {how}"


def _build_config(args) -> int:
    # Imported here: the jobs pull in multiprocessing and the parity checker.
    from tdaot.builder.jobs import build_all, select_shard
    from tdaot.builder.progress import Progress
    from tdaot.builder.report import summary, write_json, write_junit

    specs = select_shard(load_config(args.config), args.shard)
    if args.sign_key:  # the key path often comes from a CI secret, not the config
        specs = [
            dataclasses.replace(spec, options=spec.options.replace(sign_key=args.sign_key)) for spec in specs
        ]
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
    if args.leapp:
        from tdaot.trained.leapp_out import leapp_yaml

        print(leapp_yaml(args.package, manifest), end="")
        return 0
    print(manifest.to_json(indent=2) if args.json else manifest.describe())
    return 0


def _verify(args) -> int:
    from tdaot import _C
    from tdaot.runtime import verify_package, verify_weights

    signed = "; signed by a trusted key (--public-key)" if args.public_key else ""
    if _C.file_kind(args.package) == "weights":
        if args.sha256:
            raise CliError(
                f"--sha256 pins packages; {args.package!r} is a weight file (checked against its own "
                "digests and, with --public-key, its signature)"
            )
        info = verify_weights(args.package, trusted_keys=args.public_key)
        print(
            f"{args.package}: weight file, its tensors match their digests{signed}\n"
            f"for package sha256 {info['base_sha256']} (manifest sha256 {info['base_manifest_sha256']})\n"
            f"weights sha256 {info['weights_sha256']}"
        )
        return 0
    digest = verify_package(args.package, args.sha256, trusted_keys=args.public_key)
    files = len(read_manifest(args.package).files)
    pinned = "; the package matches --sha256" if args.sha256 else ""
    print(f"{args.package}: {files} files match their sha256 digests{pinned}{signed}\nsha256 {digest}")
    return 0


def _keygen(args) -> int:
    from tdaot.signing import key_id, keygen

    private, public = keygen(args.out)
    print(f"private key {private} (mode 0600: keep it secret, on the signing machine only)")
    print(f"public key  {public} (give it to services: --public-key / trusted_keys)")
    print(f"key id {key_id(private)}")
    return 0


def _sign(args) -> int:
    from tdaot.builder.pipeline import file_sha256
    from tdaot.signing import sign

    signer = sign(args.package, args.key)
    print(f"signed {args.package} with key {signer}\nsha256 {file_sha256(args.package)} (of the signed file)")
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
    from tdaot.builder.report import merge, summary, write_json, write_junit

    results = merge(args.reports)
    write_json(args.output, results, shard=None)
    if args.junit:
        write_junit(args.junit, results)
    counts = summary(results)
    print(f"merged {len(args.reports)} reports: {counts['total']} artifacts, {counts['failed']} failed")
    return 1 if counts["failed"] else 0


def main(argv: Sequence[str] | None = None, *, memo=None) -> int:
    """The command line on ``argv`` (default: sys.argv). ``memo``, a tdaot.build_memo.Recorder
    (the `tdaot` command passes one, tdaot.entry), records a successful single build."""
    args = _parser().parse_args(argv)
    try:
        commands = {
            "build": lambda a: _build(a, memo),
            "inspect": _inspect,
            "verify": _verify,
            "keygen": _keygen,
            "sign": _sign,
            "report": _report,
            "rehearse": rehearse,
            "replay": replay_command,
            "log": log_command,
        }
        return commands[args.command](args)
    except TdaotError as err:
        # Usage errors read as "error: ...", failures of the work itself name their class.
        kind = "error" if exit_code(err) == 2 else type(err).__name__
        print(f"tdaot {args.command}: {kind}: {err}", file=sys.stderr)
        return exit_code(err)


if __name__ == "__main__":
    sys.exit(main())
