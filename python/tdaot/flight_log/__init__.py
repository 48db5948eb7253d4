"""Flight logs (``.tdlog``, docs/flight-recorder.md): what a binding bound with ``record=N`` dumps,
read back (:func:`read` -> :class:`FlightLog`), replayed through the package and the eager policy
(:func:`replay`, ``tdaot replay``), summarised and drawn (``tdaot log show``) and written as MCAP
for Foxglove (:func:`export_mcap`, ``tdaot log export``).

Each piece is a module of its own: ``reader`` (the file format), ``model`` (what a log holds),
``replay``, ``summary`` and ``plots`` (``tdaot log show``), ``mcap_export``, ``command`` (the CLI).
"""

from __future__ import annotations

from tdaot.flight_log.model import FieldSpec, FlightLog, Step, SupervisorRow
from tdaot.flight_log.reader import FORMAT, MAGIC, read

__all__ = ["FORMAT", "MAGIC", "FieldSpec", "FlightLog", "Step", "SupervisorRow", "read"]
