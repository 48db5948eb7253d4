"""Bindings: inputs and outputs preallocated for one batch size, run in place (tdaot::Binding)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tdaot.runtime.policy import NativePolicy


class NativeBinding:
    """Inputs and outputs preallocated for ``batch`` rows (tdaot::Binding)::

        b = native.bind(batch=1)
        b.inputs["observation"].copy_(obs)  # write in place
        b.run()
        action = b.outputs["action"]        # read in place (the next run overwrites it)

    ``inputs`` and ``outputs`` map manifest keys to tensors that share memory with the
    native binding: write and read them in place (``copy_``, indexing), never rebind or resize
    them. Shapes are fixed when bound, so ``run`` checks nothing per call; where the package has
    a model specialised for this batch size (``allocation_free``), the native call allocates
    nothing. ``run`` releases the GIL.

    For a recurrent package a binding is a bound session: state zero and ``is_init`` true at
    first, each run carries the state outputs into the state inputs and clears ``is_init``,
    and ``reset(mask)`` marks rows as new. A binding is for one thread at a time; another
    thread's call while one runs raises :class:`tdaot.TdaotError`.

    ``cuda_graph=True`` (CUDA packages) captures the run as a CUDA graph when bound and
    replays it on the caller's current stream on every ``run``: one launch per call. ``run``
    returns once the graph is enqueued; reading the outputs on the CPU waits for it.
    """

    def __init__(self, policy: NativePolicy, batch: int, cuda_graph: bool = False) -> None:
        self._binding = policy._policy.bind(batch, cuda_graph)
        self.policy = policy
        #: The number of rows.
        self.batch: int = self._binding.batch
        #: The name of the package's model that serves this batch size ("b1", "model", ...).
        self.model: str = self._binding.model
        #: Whether ``run`` takes the allocation-free path.
        self.allocation_free: bool = self._binding.allocation_free
        #: Whether ``run`` replays a CUDA graph captured when bound.
        self.cuda_graph: bool = self._binding.cuda_graph
        #: The input tensors by manifest key (the binding's own memory).
        self.inputs: dict[str, torch.Tensor] = dict(zip(policy.manifest.input_keys, self._binding.inputs))
        #: The output tensors by manifest key (the binding's own memory).
        self.outputs: dict[str, torch.Tensor] = dict(zip(policy.manifest.output_keys, self._binding.outputs))

    def run(self) -> None:
        """Runs the model on ``inputs`` and writes ``outputs`` (and the next state) in place."""
        self._binding.run()

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Recurrent packages: zeroes the state and marks is_init, for every row or where the
        bool [batch] mask is true."""
        self._binding.reset(mask)

    def __repr__(self) -> str:
        return f"NativeBinding({self.policy.path!r}, batch={self.batch}, model={self.model!r})"
