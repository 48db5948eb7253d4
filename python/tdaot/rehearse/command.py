"""``tdaot rehearse PKG --mjcf scene.xml [--reference]``: the C++ rehearsal, then (with
``--reference``) the eager twin's parity figures. The eager policy comes from ``--factory
FILE.py:FUNCTION`` or the factory the package recorded when it was built."""

from __future__ import annotations

import argparse
import os
import tempfile

from tdaot import optional
from tdaot.errors import CliError


def add_parser(commands) -> None:
    r = commands.add_parser(
        "rehearse",
        help="a package with a contract closed loop in MuJoCo (tdaot-rehearse); --reference: against eager",
    )
    r.add_argument("package", help="the .pt2 package (its contract: observation terms, gains)")
    r.add_argument("--mjcf", required=True, help="the robot's MJCF (scene) file")
    r.add_argument("--seconds", help="simulated seconds (the tool's default: 60)")
    # dest: "command" is the subcommand's name (tdaot.cli)
    r.add_argument(
        "--command", dest="velocity_command", default="0,0,0", help="velocity_commands: vx,vy,yaw_rate"
    )
    r.add_argument("--keyframe", help="start from this MJCF keyframe")
    r.add_argument("--runtime", choices=("lite", "torch"), help="the runtime that runs the package")
    r.add_argument("--trajectory", help="the CSV trajectory to write (default: a temporary file)")
    r.add_argument("--no-envelope", action="store_true", help="without the safety envelope")
    r.add_argument(
        "--record",
        help="the flight log to write (docs/flight-recorder.md): every control step, read by the same "
        "tools as a robot's",
    )
    r.add_argument("--record-steps", type=int, help="--record: keep only the last N control steps")
    r.add_argument(
        "--no-supervisor", action="store_true", help="without the contract's supervisor of the joint targets"
    )
    r.add_argument(
        "--scenario",
        choices=("crouch-start", "push", "nan"),
        help="what happens to the robot: a start crouched 0.3 rad deeper than the default pose, a "
        "sideways push at 2 s, or a NaN observation at half the run",
    )
    r.add_argument("--crouch", help="crouch-start: radians deeper into each default angle (0.3)")
    r.add_argument("--push-speed", help="push: the base's sideways speed added, m/s (the tool's default)")
    r.add_argument("--push-time", help="push: when, in simulated seconds (2)")
    r.add_argument("--fall-fraction", help="a fall: the base below this fraction of its start height")
    r.add_argument("--reference", action="store_true", help="also run the eager policy and report parity")
    r.add_argument("--factory", help="FILE.py:FUNCTION returning (module, example): the eager policy")
    r.add_argument("--steps", type=int, default=1000, help="control steps of the eager loop of its own")
    r.add_argument(
        "--video",
        help="render the run offscreen to this file: .mp4 (ffmpeg; a .gif when there is none) or .gif",
    )
    r.add_argument("--fps", type=float, default=30.0, help="video frames per simulated second (default 30)")
    r.add_argument("--video-size", default="640x360", help="video WIDTHxHEIGHT in pixels (default 640x360)")
    r.add_argument(
        "--plots",
        help="write PNG plots into this folder: base height, forward speed, joint targets against "
        "positions, and with --reference tdaot against eager",
    )


def _command(text: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise CliError(f"--command: expected vx,vy,yaw_rate, got {text!r}")
    return values


def _training_mismatches(package: str, mjcf: str, manifest) -> list[str]:
    """One line per joint whose MJCF value differs from what the training simulator used, as
    the package's contract records it (tdaot.trained.isaac_env); nothing for a package the
    tool itself will refuse, which says why in its own words."""
    from tdaot.errors import TdaotError
    from tdaot.manifest import read_manifest
    from tdaot.trained.isaac_env import ARMATURE_KEY, armature_mismatches

    try:
        manifest = manifest or read_manifest(package)
    except (TdaotError, OSError):
        return []
    if manifest.contract is None or ARMATURE_KEY not in manifest.contract.metadata:
        return []
    try:
        import mujoco  # noqa: F401 - the MJCF's values come from MuJoCo itself
    except ImportError:
        return ["armature not compared with training: MuJoCo's Python bindings are absent (mujoco-core)"]
    return armature_mismatches(manifest.contract.metadata, mjcf)


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise CliError(f"--video-size: expected WIDTHxHEIGHT, got {text!r}") from None
    return width, height


def _require_optional_modules(args: argparse.Namespace) -> None:
    """Refuses, before any simulation, the options whose Python modules are absent (the C++
    rehearsal itself needs none): the eager twin and the video run MuJoCo's bindings, the video
    renders through PyOpenGL, the plots draw with matplotlib. The video's encoder is not required:
    without imageio-ffmpeg (or an ffmpeg on PATH) it writes a GIF and says so."""
    if args.reference:
        optional.require("tdaot rehearse --reference", optional.MUJOCO)
    if args.video:
        optional.require("tdaot rehearse --video", optional.MUJOCO, optional.PYOPENGL)
    if args.plots:
        optional.require("tdaot rehearse --plots", optional.MATPLOTLIB)


def run(args: argparse.Namespace) -> int:
    from tdaot.builder.factories import call_factory
    from tdaot.manifest import read_manifest
    from tdaot.rehearse import reference
    from tdaot.rehearse import run as rehearse
    from tdaot.rehearse.tool import read_trajectory

    command = _command(args.velocity_command)
    size = _size(args.video_size)
    if args.reference and args.scenario:
        raise CliError(
            f"--reference compares an undisturbed run with the eager twin; --scenario {args.scenario} "
            "disturbs it: run them separately"
        )
    _require_optional_modules(args)
    module = manifest = None
    if args.reference:  # the eager policy first: a rehearsal without it would be wasted
        manifest = read_manifest(args.package)
        if manifest.contract is None:
            raise CliError(f"{args.package!r} has no contract: nothing to rehearse (tdaot.Contract)")
        spec = args.factory or manifest.source.factory
        if not spec:
            raise CliError(
                f"--reference needs the eager policy: {args.package!r} records no factory; "
                "pass --factory FILE.py:FUNCTION (returning (module, example))"
            )
        module, _ = call_factory(spec)
    for line in _training_mismatches(args.package, args.mjcf, manifest):
        print(line)
    tool_args = ["--command", args.velocity_command]
    for flag in (
        "seconds",
        "keyframe",
        "runtime",
        "fall_fraction",
        "scenario",
        "crouch",
        "push_speed",
        "push_time",
        "record",
        "record_steps",
    ):
        if getattr(args, flag) is not None:
            tool_args += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    if args.no_envelope:
        tool_args.append("--no-envelope")
    if args.no_supervisor:
        tool_args.append("--no-supervisor")
    with tempfile.TemporaryDirectory() as scratch:
        trajectory = args.trajectory or os.path.join(scratch, "trajectory.csv")
        done = rehearse(args.package, args.mjcf, trajectory, tool_args)
        print(done.stdout, end="")
        rows = read_trajectory(trajectory) if module is not None or args.plots else None
        figures = None
        if module is not None:
            figures = reference(module, manifest, args.mjcf, rows, command, args.keyframe, args.steps)
            print(figures.lines(), end="")
        if args.plots:
            from tdaot.rehearse.plots import write_plots

            fall = float(args.fall_fraction) if args.fall_fraction is not None else 0.5
            files = write_plots(
                rows, args.plots, command=command, fall_fraction=fall, figures=figures,
                floating=bool(done.summary.get("floating_base")), title=os.path.basename(args.package),
            )  # fmt: skip
            print(f"plots          {args.plots}: {', '.join(os.path.basename(f) for f in files)}")
        if args.video:
            from tdaot.rehearse.video import write_video

            video = write_video(
                args.mjcf, trajectory, args.video, fps=args.fps, size=size, keyframe=args.keyframe
            )
            print(video.line(), end="")
    return 0
