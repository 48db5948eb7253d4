"""Bindings: inputs and outputs preallocated for one batch size, run in place (tdaot::Binding);
and the keyed view of tensors a binding or session owns (:class:`BoundTensors`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch

from tdaot import _C
from tdaot import keys as keyutil
from tdaot.errors import BoundKeyError, DtypeError, InvalidArgumentError, ShapeError
from tdaot.manifest import Manifest
from tdaot.runtime.supervision import SupervisorState, supervisor_argument


class BoundTensors(Mapping):
    """Tensors a binding or session owns, by manifest key (``"agents.observation"``; a tuple key
    works too). Their memory is what the native runner reads and writes, so the mapping itself
    never changes: reading gives the owned tensor (write it in place, ``t.copy_(x)``);
    ``m[key] = x`` copies ``x`` into it (the same shape and dtype, else :class:`tdaot.ShapeError`
    / :class:`tdaot.DtypeError` naming the key; no allocation); an unknown key, adding one or
    deleting one raises :class:`tdaot.BoundKeyError` (a KeyError) naming the keys held. A
    read-only mapping (a binding's outputs, written by each run) refuses assignment with
    :class:`tdaot.InvalidArgumentError`."""

    def __init__(
        self, owner: str, what: str, keys: Sequence[str], tensors: Sequence[torch.Tensor], *, writable: bool
    ) -> None:
        self._label = f"{owner}.{what}"  # how messages name it: "binding.inputs", "session.state"
        self._tensors: dict[str, torch.Tensor] = dict(zip(keys, tensors))
        self._writable = writable

    def _key(self, key) -> str:
        name = key if isinstance(key, str) else keyutil.SEPARATOR.join(keyutil.as_tuple(key))
        if name not in self._tensors:
            held = ", ".join(repr(k) for k in self._tensors) or "none"
            raise BoundKeyError(f"{self._label} has no key {name!r}; its keys: {held}", name)
        return name

    def __getitem__(self, key) -> torch.Tensor:
        return self._tensors[self._key(key)]

    def __setitem__(self, key, value: torch.Tensor) -> None:
        name = key if isinstance(key, str) else keyutil.SEPARATOR.join(keyutil.as_tuple(key))
        if name not in self._tensors:
            held = ", ".join(repr(k) for k in self._tensors) or "none"
            raise BoundKeyError(
                f"cannot add {name!r} to {self._label}: its keys are fixed when it is made ({held})",
                name,
            )
        if not self._writable:
            raise InvalidArgumentError(
                f"{self._label}[{name!r}] is written by each run and cannot be assigned: read it in place "
                "(clone() it to keep a copy)"
            )
        target = self._tensors[name]
        if not isinstance(value, torch.Tensor):
            raise InvalidArgumentError(
                f"{self._label}[{name!r}] = {type(value).__name__}: assign a tensor, or write in place with "
                f"{self._label}[{name!r}].copy_(...)"
            )
        if value.dtype != target.dtype:
            raise DtypeError(
                f"{self._label}[{name!r}]: assigned a tensor of dtype {_dtype(value.dtype)}, the buffer is "
                f"{_dtype(target.dtype)} (assignment copies into it)",
                name,
            )
        if value.shape != target.shape:
            raise ShapeError(
                f"{self._label}[{name!r}]: assigned a tensor of shape {list(value.shape)}, the buffer is "
                f"{list(target.shape)} (assignment copies into it)",
                name,
            )
        target.copy_(value)

    def __delitem__(self, key) -> None:
        name = self._key(key)
        raise BoundKeyError(
            f"cannot delete {name!r} from {self._label}: its keys are fixed when it is made",
            name,
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k!r}: {_dtype(t.dtype)}{list(t.shape)}" for k, t in self._tensors.items())
        return f"BoundTensors({self._label}: {{{shapes}}})"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Binding:
    """Inputs and outputs preallocated for ``batch`` rows (tdaot::Binding), made by
    :meth:`tdaot.Policy.bind`::

        b = native.bind(batch=1)
        b.inputs["observation"].copy_(obs)  # write in place (b.inputs["observation"] = obs copies too)
        b.run()
        action = b.outputs["action"]        # read in place (the next run overwrites it)

    ``inputs`` and ``outputs`` (:class:`BoundTensors`) map manifest keys to tensors that share
    memory with the native binding: write and read them in place. Assigning an input copies into
    its buffer (shape and dtype checked); an output, an unknown key or a deleted one raises. Shapes
    are fixed when bound, so ``run`` checks nothing per call; where the package has a model
    specialised for this batch size (``allocation_free``), the native call allocates nothing.
    ``run`` releases the GIL.

    For a recurrent package a binding is a bound session: state zero and ``is_init`` true at
    first, each run carries the state outputs into the state inputs and clears ``is_init``,
    and ``reset(mask)`` marks rows as new. A binding is for one thread at a time; another
    thread's call while one runs raises :class:`tdaot.TdaotError`.

    ``cuda_graph=True`` (CUDA packages) captures the run as a CUDA graph when bound and
    replays it on the caller's current stream on every ``run``: one launch per call. ``run``
    returns once the graph is enqueued; reading the outputs on the CPU waits for it.

    ``envelope=True``: the safety envelope around every run (:class:`tdaot.Session`'s rules).
    The contract's supervisor of the joint targets (:class:`tdaot.Supervisor`) runs on every
    ``run`` unless ``supervisor=False``; a :class:`tdaot.Supervisor` replaces it.
    :attr:`supervisor` is its state after the last run, :attr:`interventions` counts both.

    ``record=N``: the flight recorder keeps the last N runs (every input and output, the start
    time and duration, the resets, the interventions, the supervisor's state) in a ring
    allocated when bound (no allocation per run; CPU packages). :meth:`dump` writes them to a
    flight log (``docs/flight-recorder.md``), :meth:`snapshot` returns its bytes; either is
    safe from another thread while one runs the binding.
    """

    def __init__(
        self,
        policy: _C.Policy,
        manifest: Manifest,
        batch: int,
        cuda_graph: bool = False,
        *,
        envelope: bool = False,
        supervisor: Any = None,
        record: int = 0,
    ) -> None:
        self._binding = policy.bind(batch, cuda_graph, envelope, supervisor_argument(supervisor), record)
        #: The package's path.
        self.path: str = policy.path
        #: The number of rows.
        self.batch: int = self._binding.batch
        #: The name of the package's model that serves this batch size ("b1", "model", ...).
        self.model: str = self._binding.model
        #: Whether ``run`` takes the allocation-free path.
        self.allocation_free: bool = self._binding.allocation_free
        #: Whether ``run`` replays a CUDA graph captured when bound.
        self.cuda_graph: bool = self._binding.cuda_graph
        self._inputs = BoundTensors(
            "binding", "inputs", manifest.input_keys, self._binding.inputs, writable=True
        )
        self._outputs = BoundTensors(
            "binding", "outputs", manifest.output_keys, self._binding.outputs, writable=False
        )

    @property
    def inputs(self) -> BoundTensors:
        """The input tensors by manifest key (the binding's own memory)."""
        return self._inputs

    @property
    def outputs(self) -> BoundTensors:
        """The output tensors by manifest key (the binding's own memory; read-only mapping)."""
        return self._outputs

    @property
    def supervised(self) -> bool:
        """Whether a supervisor guards the joint targets."""
        return self._binding.supervised

    @property
    def supervisor(self) -> SupervisorState:
        """Row 0's supervisor state after the last run (:meth:`supervisor_row` for another);
        :class:`tdaot.InvalidArgumentError` without a supervisor."""
        return SupervisorState(*self._binding.supervisor(0))

    def supervisor_row(self, row: int) -> SupervisorState:
        """Row ``row``'s supervisor state after the last run."""
        return SupervisorState(*self._binding.supervisor(row))

    @property
    def interventions(self) -> Mapping[str, int]:
        """Steps the envelope and the supervisor changed, by kind: ``nonfinite``,
        ``rate_limited`` (the envelope), ``blended``, ``clipped``, ``fallback`` (the supervisor);
        zeros without either. A read-only snapshot."""
        return MappingProxyType(dict(self._binding.interventions))

    @property
    def record(self) -> int:
        """The runs the flight recorder keeps (``bind(record=N)``); 0 when it does not record."""
        return self._binding.record

    def dump(self, path: str | os.PathLike) -> None:
        """Writes the recorded runs to a flight log at ``path`` (created or replaced):
        :class:`tdaot.TdaotError` naming the path when it cannot be written,
        :class:`tdaot.InvalidArgumentError` when the binding does not record."""
        self._binding.dump(os.fspath(path))

    def snapshot(self) -> bytes:
        """The bytes :meth:`dump` would write: every recorded run whole, never torn, even while
        another thread runs the binding."""
        return self._binding.snapshot()

    def run(self) -> None:
        """Runs the model on ``inputs`` and writes ``outputs`` (and the next state) in place."""
        self._binding.run()

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Recurrent packages: zeroes the state and marks is_init, for every row or where the
        bool [batch] mask is true; with the envelope or a supervisor, those rows start afresh."""
        self._binding.reset(mask)

    def __repr__(self) -> str:
        return f"Binding({self.path!r}, batch={self.batch}, model={self.model!r})"
