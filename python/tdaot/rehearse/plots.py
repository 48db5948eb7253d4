"""The rehearsal drawn (``tdaot rehearse --plots DIR``): PNG files from the trajectory the C++ tool
wrote, with matplotlib (its Agg backend: no display).

- ``base_height.png``: the base height, with the fall threshold (a floating base only);
- ``forward_speed.png``: the base speed along the starting heading, raw and over 1 s, against the
  command's vx (a floating base only);
- ``joints.png``: each contract joint's target (the package's mapped action) against its position;
- ``reference.png`` (with ``--reference``): tdaot against eager: a joint's target from both along
  the C++ trajectory, and per control step the largest joint-target difference along the C++
  trajectory and the eager loop's own base and joint position differences from the C++ loop.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tdaot._png_figures import PngFigures
from tdaot.rehearse.video import forward_speeds

if TYPE_CHECKING:
    from tdaot.rehearse.reference import Figures


def _joints(rows: Sequence[dict]) -> list[str]:
    return [c[2:] for c in rows[0] if c.startswith("q.")]


def _moving_average(values: np.ndarray, n: int) -> np.ndarray:
    n = max(1, min(n, len(values)))
    return np.convolve(values, np.ones(n) / n, mode="same")


def write_plots(
    rows: Sequence[dict],
    directory: str | os.PathLike,
    *,
    command: Sequence[float] = (0.0, 0.0, 0.0),
    fall_fraction: float = 0.5,
    floating: bool = True,
    figures: Figures | None = None,
    title: str = "",
) -> list[str]:
    """Writes the PNG files of the module docstring into ``directory`` (made if needed) for the
    trajectory ``rows`` (tool.read_trajectory); ``floating``: the robot has a free base (the
    summary's ``floating_base``; else no height or speed plots); ``figures``: the reference's,
    with its series. Returns the paths written."""
    pngs = PngFigures(directory, title)
    plt, save = pngs.plt, pngs.save
    t = np.array([r["time"] for r in rows])

    if floating:
        z = np.array([r["base_z"] for r in rows])
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.plot(t, z, lw=1, label="base height")
        ax.axhline(
            fall_fraction * z[0], color="tab:red", ls="--", lw=1, label=f"fall ({fall_fraction:g} x start)"
        )
        ax.set(xlabel="time (s)", ylabel="m", ylim=(0, max(z.max(), z[0]) * 1.1))
        ax.legend(loc="lower right", fontsize=8)
        save(fig, "base_height.png")

        speed = np.array(forward_speeds(rows))
        dt = t[1] - t[0] if len(t) > 1 else 1.0
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.plot(t, speed, lw=0.6, alpha=0.5, label="forward speed")
        ax.plot(t, _moving_average(speed, round(1.0 / dt)), lw=1.5, label="over 1 s")
        ax.axhline(command[0], color="k", ls="--", lw=1, label=f"command vx {command[0]:g}")
        ax.set(xlabel="time (s)", ylabel="m/s")
        ax.legend(loc="lower right", fontsize=8)
        save(fig, "forward_speed.png")

    joints = _joints(rows)
    columns = 2 if len(joints) > 1 else 1
    lines = math.ceil(len(joints) / columns)
    fig, axes = plt.subplots(lines, columns, figsize=(8, 1.4 * lines + 0.6), sharex=True, squeeze=False)
    for ax, joint in zip(axes.flat, joints):
        ax.plot(t, [r[f"target.{joint}"] for r in rows], lw=1, ls="--", label="target")
        ax.plot(t, [r[f"q.{joint}"] for r in rows], lw=1, label="position")
        ax.set_title(joint, fontsize=8, loc="left")
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(joints) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="upper right")
    for ax in axes[-1]:
        ax.set_xlabel("time (s)", fontsize=8)
    save(fig, "joints.png")

    if figures is not None and figures.series is not None:
        series = figures.series
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
        joint = joints[int(np.argmax(np.ptp(series["eager_targets"], axis=0)))]
        index = joints.index(joint)
        top.plot(t, [r[f"target.{joint}"] for r in rows], lw=2.5, alpha=0.6, label="tdaot (C++ loop)")
        top.plot(
            t, series["eager_targets"][:, index], lw=1, ls="--", color="k", label="eager, same observations"
        )
        top.set(ylabel="rad", title=f"target of {joint}")
        top.title.set_fontsize(9)
        top.legend(fontsize=8, loc="upper right")
        tiny = 1e-12  # a difference of exactly 0 on a log scale
        bottom.semilogy(t, np.maximum(series["along"], tiny), lw=1, label="joint targets, same observations")
        steps = t[: len(series["closed_base"])]
        if np.any(series["closed_base"] > 0):
            bottom.semilogy(
                steps, np.maximum(series["closed_base"], tiny), lw=1, label="base position, own loop (m)"
            )
        bottom.semilogy(
            steps, np.maximum(series["closed_joints"], tiny), lw=1, label="joint positions, own loop"
        )
        bottom.set(xlabel="time (s)", ylabel="largest |tdaot - eager|")
        bottom.legend(fontsize=8, loc="lower right")
        save(fig, "reference.png")
    return pngs.written
