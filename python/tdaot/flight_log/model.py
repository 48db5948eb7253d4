"""What a flight log holds once read (tdaot.flight_log.read): the header's facts, the slot layout
and the whole steps in ``seq`` order, inputs and outputs as torch tensors of the recorded dtype
and shape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from tdaot.manifest import Manifest
from tdaot.runtime.supervision import MODES

# Step flags (docs/flight-recorder.md, "A step's slot").
THREW = 1 << 0
NONFINITE = 1 << 1
RATE_LIMITED = 1 << 2
WEIGHTS_CHANGING = 1 << 3
#: The envelope's and the supervisor's intervention kinds, as Binding.interventions names them.
ENVELOPE_KINDS = ("nonfinite", "rate_limited")
SUPERVISOR_KINDS = ("blended", "clipped", "fallback")


@dataclass(frozen=True)
class FieldSpec:
    """One field of a slot, as the header's ``fields`` lays it out: ``name`` ("seq",
    "inputs/policy.obs", ...), byte ``offset`` in the slot, ``dtype`` (a manifest dtype, a
    bookkeeping integer type or "record"), ``shape``; ``key`` and ``kind`` ("input"/"output")
    for the tensors; ``elements`` naming the entries of a counted or record field."""

    name: str
    offset: int
    dtype: str
    shape: tuple[int, ...]
    key: str | None = None
    kind: str | None = None
    elements: tuple[str, ...] = ()


@dataclass(frozen=True)
class SupervisorRow:
    """One row's supervisor state after a step (tdaot.SupervisorState's fields; ``mode`` by name,
    an unknown value as ``"mode <n>"``)."""

    mode: str
    gain_scale: float
    damping_scale: float
    blend: float
    steps: int

    @classmethod
    def from_record(cls, record: Any) -> SupervisorRow:
        mode = int(record["mode"])
        return cls(
            mode=MODES[mode] if 0 <= mode < len(MODES) else f"mode {mode}",
            gain_scale=float(record["gain_scale"]),
            damping_scale=float(record["damping_scale"]),
            blend=float(record["blend"]),
            steps=int(record["steps"]),
        )


@dataclass(frozen=True)
class Step:
    """One recorded step: its ``seq`` (from 1 since bind), ``start_ns`` (steady clock since bind)
    and ``duration_ns``, ``flags``, the binding's intervention counts after it, the rows
    ``reset`` before it (bool [batch]), each row's supervisor state after it (None without a
    supervisor), every input and output by manifest key ([batch, *shape] tensors), and the
    generation of the weights it ran (None in a log from before it was recorded)."""

    seq: int
    start_ns: int
    duration_ns: int
    flags: int
    interventions: Mapping[str, int]
    reset: torch.Tensor
    supervisor: tuple[SupervisorRow, ...] | None
    inputs: Mapping[str, torch.Tensor]
    outputs: Mapping[str, torch.Tensor]
    weights_generation: int | None = None

    @property
    def threw(self) -> bool:
        """The step threw: its outputs are what the buffers held, not a result."""
        return bool(self.flags & THREW)

    @property
    def nonfinite(self) -> bool:
        """The envelope held a non-finite step."""
        return bool(self.flags & NONFINITE)

    @property
    def rate_limited(self) -> bool:
        """The envelope rate-limited an output."""
        return bool(self.flags & RATE_LIMITED)

    @property
    def weights_changing(self) -> bool:
        """Weights were being made live (swap_weights, rollback_weights) while the step ran:
        which ones it ran is not known."""
        return bool(self.flags & WEIGHTS_CHANGING)


@dataclass(frozen=True)
class FlightLog:
    """A flight log as :func:`tdaot.flight_log.read` found it. ``header`` is the JSON header
    whole; ``manifest`` the package's (a :class:`tdaot.manifest.Manifest`, None when the header's
    could not be parsed: ``manifest_problem`` says why). ``supervisor`` is the supervisor the
    binding ran (the manifest's "contract.supervisor" form: the contract's or one given at bind),
    ``weights_sha256`` and ``weights_generation`` the weights live when it was bound (each None
    in a log from before they were recorded). ``steps`` are the whole slots in ``seq`` order;
    ``torn`` counts slots skipped because a step was overwriting them, ``unwritten`` the slots no
    step reached."""

    path: str
    header: Mapping[str, Any]
    package_path: str
    package_sha256: str
    manifest: Manifest | None
    runtime: str
    model: str
    batch: int
    capacity: int
    envelope: bool
    supervised: bool
    bound_at_unix_ns: int
    fields: tuple[FieldSpec, ...]
    steps: tuple[Step, ...]
    torn: int = 0
    unwritten: int = 0
    manifest_problem: str = ""
    supervisor: Mapping[str, Any] | None = None
    weights_sha256: str | None = None
    weights_generation: int | None = None
    _by_name: dict[str, FieldSpec] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_name.update({spec.name: spec for spec in self.fields})

    @property
    def input_keys(self) -> list[str]:
        """The recorded inputs' manifest keys, in the slot's (manifest) order."""
        return [spec.key for spec in self.fields if spec.kind == "input"]

    @property
    def output_keys(self) -> list[str]:
        return [spec.key for spec in self.fields if spec.kind == "output"]

    def slot_field(self, name: str) -> FieldSpec | None:
        """The slot field ``name`` ("inputs/obs", "supervisor", ...), or None."""
        return self._by_name.get(name)

    def spec(self, key: str, kind: str) -> FieldSpec:
        """The field of input or output ``key``."""
        return self._by_name[f"{kind}s/{key}"]

    @property
    def manifest_dict(self) -> Mapping[str, Any]:
        """The package's manifest as the header carries it (JSON)."""
        return self.header["package"]["manifest"]

    def gaps(self) -> list[tuple[int, int]]:
        """(last seq before, first seq after) for each run of missing steps between the whole
        ones (torn slots; the ring's overwritten steps before the first are not a gap)."""
        return [
            (before.seq, after.seq)
            for before, after in zip(self.steps, self.steps[1:])
            if after.seq != before.seq + 1
        ]

    def other_weights(self, step: Step) -> bool:
        """Whether ``step`` may have run other weights than those live at bind: swapped in (or
        rolled back) since, or being made live while it ran. False in a log from before the
        weights were recorded."""
        if step.weights_generation is None or self.weights_generation is None:
            return False
        return step.weights_changing or step.weights_generation != self.weights_generation

    def series(self, key: str, kind: str = "output") -> torch.Tensor:
        """Input or output ``key`` over the steps: [steps, batch, *shape]."""
        values = [(step.outputs if kind == "output" else step.inputs)[key] for step in self.steps]
        spec = self.spec(key, kind)
        if not values:
            return torch.empty(0, *spec.shape)
        return torch.stack(values)

    def wall_ns(self, step: Step) -> int:
        """When ``step`` began, in nanoseconds since the Unix epoch (bound_at_unix_ns + start_ns)."""
        return self.bound_at_unix_ns + step.start_ns

    def __repr__(self) -> str:
        seqs = f"seq {self.steps[0].seq}..{self.steps[-1].seq}" if self.steps else "no steps"
        return f"FlightLog({self.path!r}, {len(self.steps)} steps, {seqs}, batch={self.batch})"
