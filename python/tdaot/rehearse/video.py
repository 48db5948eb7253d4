"""A rehearsal you can watch (``tdaot rehearse --video out.mp4``): the trajectory the C++ tool wrote,
replayed in MuJoCo and rendered offscreen, one frame every ``1/fps`` simulated seconds.

Each frame sets the whole ``qpos`` of the row at or before its time (the base pose, the contract's
joints, the ``qpos.<address>`` columns of passive joints), runs ``mj_forward`` and renders it with
``mujoco.Renderer`` through a camera that follows the base (a fixed base: a still camera on the
model), with the time, base height and forward speed drawn in a corner.

MuJoCo picks its OpenGL backend when it is first imported (``MUJOCO_GL``), so the rendering runs
in a child process (``python -m tdaot.rehearse.video``): ``MUJOCO_GL`` as set, else EGL, else
OSMesa, both Mesa's software renderers from Debian (``libegl1 libegl-mesa0 libgl1-mesa-dri
libosmesa6``) through PyOpenGL. Frames go to ``ffmpeg`` (``imageio-ffmpeg``'s binary, else one on
PATH) as H.264 MP4; a ``.gif`` output, or an ``.mp4`` where no ffmpeg is found, is written by
Pillow as a GIF, and :class:`Video` says which.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tdaot.rehearse.tool import RehearsalError, read_trajectory

BACKENDS = ("egl", "osmesa")
GL_PACKAGES = "apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6; pip install PyOpenGL"
GL_FAILED = 3  # the child's exit code when no OpenGL context could be made


@dataclass(frozen=True)
class Video:
    """One written video: ``path`` (where it is: a ``.gif`` next to an asked-for ``.mp4`` without an
    encoder), ``format`` ("mp4" or "gif"), ``frames`` (one per ``1/fps`` of the run), the OpenGL
    ``backend``, ``render_s`` (seconds per frame, rendering alone) and ``note`` (why the format
    differs from the one asked for; empty when it does not)."""

    path: str
    format: str
    frames: int
    fps: float
    width: int
    height: int
    backend: str
    render_s: float
    note: str = ""

    def line(self) -> str:
        what = "MP4 (H.264)" if self.format == "mp4" else "GIF"
        size = os.path.getsize(self.path) / 1e6
        text = (
            f"video          {self.path}: {what}, {self.frames} frames at {self.fps:g} fps, "
            f"{self.width}x{self.height}, {size:.1f} MB ({self.backend}, {self.render_s:.3f} s a frame)\n"
        )
        return (f"video          {self.note}\n" if self.note else "") + text


def find_ffmpeg() -> str | None:
    """An ffmpeg executable: imageio-ffmpeg's (``$IMAGEIO_FFMPEG_EXE``, its own binary), else one on
    PATH; None when there is none."""
    try:
        import imageio_ffmpeg

        found = imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError):
        found = None
    found = shutil.which(found) if found else None
    return found or shutil.which("ffmpeg")


def frame_rows(times: Sequence[float], fps: float) -> list[int]:
    """For each frame of a run whose control steps start at ``times`` (equally spaced), the row
    shown: the last at or before the frame's time. Frames cover [0, end of the last step)."""
    if not times:
        return []
    dt = times[1] - times[0] if len(times) > 1 else 1.0 / fps
    count = math.ceil(len(times) * dt * fps - 1e-6)
    return [min(int(math.floor(k / fps / dt + 1e-6)), len(times) - 1) for k in range(count)]


def write_video(
    mjcf: str | os.PathLike,
    trajectory: str | os.PathLike,
    out: str | os.PathLike,
    *,
    fps: float = 30.0,
    size: tuple[int, int] = (640, 360),
    keyframe: str | None = None,
    ffmpeg: str | None = "auto",
) -> Video:
    """Renders the ``trajectory`` (the C++ tool's CSV) of a rehearsal in ``mjcf`` to ``out``.
    ``ffmpeg``: "auto" (:func:`find_ffmpeg`), a path, or None for no encoder (an ``.mp4`` becomes
    a GIF). RehearsalError when no OpenGL backend works or the replay cannot be made."""
    out = Path(out)
    if fps <= 0 or size[0] < 16 or size[1] < 16:
        raise RehearsalError(f"--fps must be > 0 and the video at least 16x16, got {fps} and {size}")
    note = ""
    if out.suffix.lower() == ".gif":
        encoder = None
    else:
        encoder = find_ffmpeg() if ffmpeg == "auto" else ffmpeg
        if encoder is None:
            gif = out.with_suffix(".gif")
            note = (
                f"no MP4 encoder (ffmpeg: pip install imageio-ffmpeg, or apt-get install ffmpeg): "
                f"wrote a GIF, {gif}, instead of {out}"
            )
            out = gif
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tdaot.rehearse.video", os.fspath(mjcf), os.fspath(trajectory)]
    command += [os.fspath(out), "--fps", repr(fps), "--size", f"{size[0]}x{size[1]}"]
    command += ["--ffmpeg", encoder or ""] + (["--keyframe", keyframe] if keyframe else [])
    given = os.environ.get("MUJOCO_GL")
    failures = []
    for backend in (given,) if given else BACKENDS:
        done = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, "MUJOCO_GL": backend}
        )
        if done.returncode == 0:
            return Video(**json.loads(done.stdout.strip().splitlines()[-1]), note=note)
        message = (
            done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit code {done.returncode}"
        )
        if done.returncode != GL_FAILED:
            raise RehearsalError(f"the video could not be rendered: {message}", 1)
        failures.append(f"MUJOCO_GL={backend}: {message}")
    raise RehearsalError(
        "no OpenGL backend could render the video offscreen (" + "; ".join(failures) + "). "
        f"Mesa's software renderers: {GL_PACKAGES}",
        1,
    )


class _Replay:
    """The model at each row's state: qpos set from the row, mj_forward."""

    def __init__(self, mujoco, mjcf: str, keyframe: str | None, columns: Sequence[str]):
        self.mujoco = mujoco
        self.model = mujoco.MjModel.from_xml_path(mjcf)
        self.data = mujoco.MjData(self.model)
        m = self.model
        if keyframe:
            mujoco.mj_resetDataKeyframe(m, self.data, m.key(keyframe).id)
        free = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        self.base = int(m.jnt_qposadr[free[0]]) if free else None
        self.base_body = int(m.jnt_bodyid[free[0]]) if free else None
        self.columns: list[tuple[int, str]] = []  # (qpos address, column)
        for name in columns:
            if name.startswith("q."):
                self.columns.append((int(m.jnt_qposadr[m.joint(name[2:]).id]), name))
            elif name.startswith("qpos."):
                self.columns.append((int(name[5:]), name))
        if self.base is not None:
            base = ("base_x", "base_y", "base_z", "base_qw", "base_qx", "base_qy", "base_qz")
            self.columns += [(self.base + i, c) for i, c in enumerate(base)]
        missing = sorted(set(range(m.nq)) - {a for a, _ in self.columns})
        if missing:
            raise ValueError(
                f"the trajectory does not hold qpos coordinates {missing} of {mjcf} (a tdaot-rehearse "
                "older than the qpos.<address> columns: rebuild it)"
            )

    def set(self, row: dict[str, float]) -> None:
        for address, column in self.columns:
            self.data.qpos[address] = row[column]
        self.data.time = row["time"]
        self.mujoco.mj_forward(self.model, self.data)


def _camera(mujoco, replay: _Replay, rows: Sequence[dict]):
    """A camera following the base from the side and a little ahead, slightly above, its distance
    from the model's size and the base's starting height; a still one on the model for a fixed
    base."""
    m = replay.model
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    camera.distance = 2.2 * float(m.stat.extent)
    camera.elevation = -15.0
    camera.azimuth = 120.0
    if replay.base is not None:
        # A standing robot is about 1.7 times its base height tall: all of it in the 45-degree view.
        camera.distance = max(camera.distance, 2.7 * rows[0]["base_z"])
        w, x, y, z = (rows[0][f"base_q{a}"] for a in "wxyz")
        heading = math.degrees(math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))
        camera.azimuth = heading + 120.0
    else:
        replay.set(rows[0])
        camera.lookat[:] = m.stat.center
    return camera


def forward_speeds(rows: Sequence[dict]) -> list[float]:
    """The base speed along the starting heading at each row (differences of the rows around it)."""
    if len(rows) < 2 or "base_x" not in rows[0]:
        return [0.0] * len(rows)
    w, x, y, z = (rows[0][f"base_q{a}"] for a in "wxyz")
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    hx, hy = math.cos(yaw), math.sin(yaw)
    out = []
    for i in range(len(rows)):
        a, b = rows[max(i - 1, 0)], rows[min(i + 1, len(rows) - 1)]
        span = b["time"] - a["time"]
        out.append(((b["base_x"] - a["base_x"]) * hx + (b["base_y"] - a["base_y"]) * hy) / span)
    return out


def _render(args: argparse.Namespace) -> dict:
    import mujoco
    from PIL import Image, ImageDraw, ImageFont

    rows = read_trajectory(args.trajectory)
    if not rows:
        raise ValueError(f"the trajectory {args.trajectory} has no rows")
    width, height = (int(v) for v in args.size.split("x"))
    replay = _Replay(mujoco, args.mjcf, args.keyframe, list(rows[0]))
    m = replay.model
    m.vis.global_.offwidth = max(int(m.vis.global_.offwidth), width)
    m.vis.global_.offheight = max(int(m.vis.global_.offheight), height)
    # Mesa renders on the CPU: a 1024 shadow map and 2x multisampling keep a frame affordable.
    m.vis.quality.shadowsize = min(int(m.vis.quality.shadowsize), 1024)
    m.vis.quality.offsamples = min(int(m.vis.quality.offsamples), 2)
    try:
        renderer = mujoco.Renderer(m, height, width)
    except Exception as error:  # noqa: BLE001 - any failure to make a context: try the next backend
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(GL_FAILED)
    camera = _camera(mujoco, replay, rows)
    start_height = rows[0].get("base_z", 0.0)
    speeds = forward_speeds(rows)
    font = ImageFont.load_default(size=max(10, height // 28))
    encoder = None
    if args.ffmpeg:
        encoder = subprocess.Popen(
            [args.ffmpeg, "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
             "-s", f"{width}x{height}", "-r", f"{args.fps:g}", "-i", "-", "-an", "-c:v", "libx264",
             "-pix_fmt", "yuv420p", "-crf", "26", "-preset", "veryfast", "-movflags", "+faststart",
             "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", args.out],
            stdin=subprocess.PIPE,
        )  # fmt: skip
    gif = []
    rendering = 0.0
    indices = frame_rows([row["time"] for row in rows], args.fps)
    for frame, index in enumerate(indices):
        row = rows[index]
        replay.set(row)
        if replay.base is not None:
            camera.lookat[:] = (row["base_x"], row["base_y"], 0.8 * start_height)
        began = time.perf_counter()
        renderer.update_scene(replay.data, camera)
        pixels = renderer.render()
        rendering += time.perf_counter() - began
        image = Image.fromarray(pixels)
        text = f"t {frame / args.fps:6.2f} s"
        if replay.base is not None:
            text += f"   base {row['base_z']:.2f} m   forward {speeds[index]:+.2f} m/s"
        if row.get("supervisor", "none") != "none":  # what the supervisor did: blending, damped...
            text += f"   supervisor {row['supervisor']} (gain x{row['gain_scale']:.2f})"
        ImageDraw.Draw(image).text((8, 6), text, fill=(255, 255, 255), font=font, stroke_width=2,
                                   stroke_fill=(0, 0, 0))  # fmt: skip
        if encoder is not None:
            encoder.stdin.write(image.tobytes())
        else:
            gif.append(image.quantize(method=Image.Quantize.FASTOCTREE))
    renderer.close()
    if encoder is not None:
        encoder.stdin.close()
        if encoder.wait() != 0:
            raise RuntimeError(f"{args.ffmpeg} failed (exit code {encoder.returncode}) writing {args.out}")
    else:
        gif[0].save(args.out, save_all=True, append_images=gif[1:], duration=round(1000 / args.fps), loop=0)
    return {
        "path": args.out,
        "format": "mp4" if encoder is not None else "gif",
        "frames": len(indices),
        "fps": args.fps,
        "width": width,
        "height": height,
        "backend": os.environ.get("MUJOCO_GL", "default").upper(),
        "render_s": rendering / max(len(indices), 1),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tdaot.rehearse.video", description=__doc__.split("\n")[0]
    )
    parser.add_argument("mjcf")
    parser.add_argument("trajectory")
    parser.add_argument("out")
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--size", default="640x360")
    parser.add_argument("--keyframe")
    parser.add_argument("--ffmpeg", default="", help="the ffmpeg to encode MP4 with; empty: a GIF (Pillow)")
    print(json.dumps(_render(parser.parse_args(argv))))


if __name__ == "__main__":
    main()
