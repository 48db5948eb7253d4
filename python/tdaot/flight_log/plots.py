"""A flight log drawn (``tdaot log show LOG --plots DIR``): PNG files with matplotlib (its Agg
backend: no display), as ``tdaot rehearse --plots`` draws a rehearsal.

- ``outputs_<key>.png``: each output over time, one line per element (row 0; the contract's joint
  names in the legend), the steps the envelope or supervisor intervened on marked;
- ``step_time.png``: each step's duration and the time between step starts;
- ``supervisor.png`` (with a supervisor): each row's mode and blend over time.
"""

from __future__ import annotations

import os

import numpy as np

from tdaot._png_figures import PngFigures
from tdaot.flight_log.model import FlightLog
from tdaot.flight_log.names import element_names
from tdaot.flight_log.summary import intervention_steps
from tdaot.runtime.supervision import MODES

# Elements drawn in one figure before the legend is left out (it would hide the lines).
_LEGEND_MAX = 24


def _file_name(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in key)


def write_plots(log: FlightLog, directory: str | os.PathLike) -> list[str]:
    """Writes the PNG files of the module docstring into ``directory`` (made if needed); returns
    the paths written. Without steps, nothing is drawn."""
    pngs = PngFigures(directory)
    plt, save = pngs.plt, pngs.save
    if not log.steps:
        return pngs.written
    start = log.steps[0].start_ns
    t = np.array([(step.start_ns - start) / 1e9 for step in log.steps])
    seq_time = {step.seq: t[i] for i, step in enumerate(log.steps)}
    marked = [seq_time[seq] for seq, _ in intervention_steps(log) if seq in seq_time]
    pngs.title = f"{os.path.basename(log.path)}: seq {log.steps[0].seq}..{log.steps[-1].seq}"

    for key in log.output_keys:
        values = log.series(key).reshape(len(log.steps), log.batch, -1)[:, 0].double().numpy()
        names = element_names(log, key, "output")
        fig, ax = plt.subplots(figsize=(9, 4))
        for j in range(values.shape[1]):
            ax.plot(t, values[:, j], lw=1, label=names[j])
        for when in marked:
            ax.axvline(when, color="tab:red", lw=0.5, alpha=0.4)
        ax.set(xlabel="time since the first step (s)", ylabel=key, title=f"{key} (row 0)")
        if values.shape[1] <= _LEGEND_MAX:
            ax.legend(fontsize=6, ncol=max(1, values.shape[1] // 8), loc="upper right")
        save(fig, f"outputs_{_file_name(key)}.png")

    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.plot(t, [step.duration_ns / 1e3 for step in log.steps], lw=1, label="step duration")
    if len(log.steps) > 1:
        ax.plot(
            t[1:], np.diff([step.start_ns for step in log.steps]) / 1e3, lw=0.8, label="period", alpha=0.7
        )
    ax.set(xlabel="time since the first step (s)", ylabel="us", yscale="log")
    ax.legend(fontsize=8)
    save(fig, "step_time.png")

    if log.supervised and log.steps[0].supervisor is not None:
        fig, (modes, blends) = plt.subplots(2, 1, figsize=(9, 4.5), sharex=True)
        for row in range(len(log.steps[0].supervisor)):
            states = [step.supervisor[row] for step in log.steps]
            codes = [MODES.index(s.mode) if s.mode in MODES else -1 for s in states]
            modes.step(t, codes, where="post", lw=1, label=f"row {row}")
            blends.plot(t, [s.blend for s in states], lw=1, label=f"row {row}")
        modes.set(yticks=range(len(MODES)), yticklabels=MODES, title="supervisor mode")
        blends.set(xlabel="time since the first step (s)", ylabel="blend", title="soft start blend")
        if log.batch <= 8:
            modes.legend(fontsize=7)
        save(fig, "supervisor.png")
    return pngs.written
