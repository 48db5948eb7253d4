"""Rehearsal before the robot, from Python: ``tdaot rehearse PKG --mjcf scene.xml [--reference]``.

:func:`run` runs the C++ tool ``tdaot-rehearse`` (cpp/tools/tdaot_rehearse: the package closed
loop in MuJoCo through the lite runtime, or the full runtime with ``runtime="torch"``) and reads
its summary and trajectory. :func:`reference` is its eager twin: the same loop in Python, through
MuJoCo's Python bindings (the ``mujoco-core`` wheel carries them) and the eager policy, giving the
two parity figures of a rehearsal: the largest action difference along the C++ trajectory (the
eager policy fed the observations the C++ loop recorded) and the path difference (the eager loop
closed on its own against the C++ loop's base and joints).
"""

from tdaot.rehearse.reference import Figures, reference
from tdaot.rehearse.tool import Rehearsal, RehearsalError, find_tool, read_trajectory, run

__all__ = ["Figures", "Rehearsal", "RehearsalError", "find_tool", "read_trajectory", "reference", "run"]
