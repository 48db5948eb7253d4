"""The flight log commands of ``tdaot`` (tdaot.cli): ``tdaot replay LOG`` and ``tdaot log show|export
LOG``."""

from __future__ import annotations

import argparse

from tdaot.optional import MATPLOTLIB, MCAP, require


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a tolerance is a number >= 0")
    return value


def add_parsers(commands) -> None:
    """``replay`` and ``log`` on the subcommands of ``tdaot``."""
    r = commands.add_parser(
        "replay",
        help="re-run a flight log's recorded inputs through its package (and the eager policy) and "
        "print the first step and key where they diverge",
    )
    r.add_argument("log", metavar="LOG", help="a flight log (.tdlog: Binding.dump, tdaot-lite run --record)")
    r.add_argument(
        "--package",
        metavar="PKG",
        help="the package to replay it on (default: the path the log records); its sha256 must be the log's",
    )
    r.add_argument(
        "--weights",
        metavar="FILE",
        help="the weight file (tdaot.export_weights) that was live when the log was bound, swapped in "
        "before the replay; its weights sha256 must be the log's",
    )
    r.add_argument(
        "--policy",
        metavar="FILE.py:FACTORY",
        help="also replay the eager policy (the factory's module), recurrent state carried and resets "
        "honoured, against the package's outputs",
    )
    r.add_argument(
        "--rtol",
        type=_tolerance,
        help="relative tolerance (default: the package bit for bit, the "
        "eager policy each dtype's parity tolerance)",
    )
    r.add_argument("--atol", type=_tolerance, help="absolute tolerance (default: as --rtol)")

    g = commands.add_parser("log", help="read flight logs: show one, export one as MCAP")
    g_commands = g.add_subparsers(dest="log_command", required=True)
    s = g_commands.add_parser(
        "show", help="steps, gaps, interventions, supervisor modes and step-time percentiles of a flight log"
    )
    s.add_argument("log", metavar="LOG")
    s.add_argument(
        "--plots",
        metavar="DIR",
        help="also draw each output and the step times as PNG files in DIR (matplotlib)",
    )
    e = g_commands.add_parser("export", help="write a flight log as MCAP (Foxglove), one channel per key")
    e.add_argument("log", metavar="LOG")
    e.add_argument("--mcap", required=True, metavar="OUT", help="the MCAP file to write")


def replay_command(args) -> int:
    from tdaot.flight_log import read
    from tdaot.testing.flight_replay import replay_report

    log = read(args.log)
    report = replay_report(
        log, args.policy, package=args.package, weights=args.weights, rtol=args.rtol, atol=args.atol
    )
    print(report.describe())
    return 0 if report.ok else 1


def log_command(args) -> int:
    from tdaot.flight_log import read

    if args.log_command == "show":
        if args.plots:
            require("tdaot log show --plots", MATPLOTLIB)
        from tdaot.flight_log.summary import describe

        log = read(args.log)
        print(describe(log), end="")
        if args.plots:
            from tdaot.flight_log.plots import write_plots

            for path in write_plots(log, args.plots):
                print(f"wrote {path}")
        return 0
    require("tdaot log export --mcap", MCAP)
    from tdaot.flight_log.mcap_export import export_mcap

    log = read(args.log)
    counts = export_mcap(log, args.mcap)
    print(
        f"wrote {args.mcap}: {len(log.steps)} steps, {len(counts)} channels "
        f"({', '.join(counts)}), {sum(counts.values())} messages"
    )
    return 0
