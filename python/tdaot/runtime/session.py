"""Sessions: a policy stepped natively inside a safety envelope, a recurrent policy's state
carried from step to step (tdaot::Session)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch
from tensordict import TensorDict

from tdaot import _C
from tdaot.manifest import Manifest
from tdaot.runtime.binding import BoundTensors
from tdaot.runtime.inputs import Inputs, as_tensordict, keyed_inputs, naming_given_keys, td_keys
from tdaot.runtime.supervision import SupervisorState, supervisor_argument


class Session:
    """Steps a policy (tdaot::Session), made by :meth:`tdaot.Policy.session`. For a recurrent
    policy, ``step`` needs only the non-state inputs, fills in the state (zero at creation) and
    ``is_init`` (true for rows reset since the last step, so all rows at the first step), and
    keeps the state outputs for the next step. A step may also carry them, as a torchrl rollout
    TensorDict does: a state entry replaces the carried state, and ``is_init`` (one flag per
    row) resets its true rows like ``reset(mask)`` (state zeroed, the model sees is_init);
    neither is ever ignored. Other entries of a TensorDict that are not inputs are ignored.

    The safety envelope (every package): a step with a NaN or infinite input or output
    element returns the previous step's outputs (before the first step: each output's contract
    offset clipped to [low, high], 0 without a signal) and leaves the state as it was; an output
    whose contract signal has ``max_delta`` moves at most that far per element from the previous
    step's output. The first step after creation or a reset (of a row) is not rate limited.
    :attr:`interventions` counts the steps each happened on.

    The contract's supervisor of the joint targets (:class:`tdaot.Supervisor`: soft start,
    limits, fallback) runs after the envelope on every step unless ``supervisor=False``; a
    :class:`tdaot.Supervisor` replaces it. :attr:`supervisor` is its state after the last step.

    A session is single-threaded: using one from two threads at once raises
    :class:`tdaot.TdaotError`. Sessions of one policy are independent.
    """

    def __init__(self, policy: _C.Policy, manifest: Manifest, batch: int, *, supervisor: Any = None) -> None:
        self._session = _C.Session(policy, batch, supervisor_argument(supervisor))
        #: The package's path.
        self.path: str = policy.path
        self.batch = batch
        self._out_keys = td_keys(manifest.output_keys)
        recurrent = manifest.recurrent
        # What a step may carry besides its inputs: the state, and is_init (torchrl's key
        # when the model does not read one).
        carried = (
            [pair.input for pair in recurrent.state] + [recurrent.is_init or "is_init"] if recurrent else []
        )
        self._in_keys = td_keys(list(self._session.input_keys) + carried)

    @property
    def input_keys(self) -> list[str]:
        """The manifest keys ``step`` takes."""
        return list(self._session.input_keys)

    @property
    def state(self) -> BoundTensors:
        """The state the next step sees, keyed by state input key (the session's own tensors,
        empty for a package that is not recurrent): ``session.state[k] = x`` copies ``x`` into it
        (shape and dtype checked), as ``session.state[k].copy_(x)`` does."""
        state = dict(self._session.state)
        return BoundTensors("session", "state", list(state), list(state.values()), writable=True)

    @property
    def interventions(self) -> Mapping[str, int]:
        """Steps the safety envelope changed, by kind: ``nonfinite`` (the previous outputs were
        returned) and ``rate_limited`` (an output was held to its max_delta); and the
        supervisor's: ``blended``, ``clipped``, ``fallback``. Since creation; a read-only
        snapshot."""
        return MappingProxyType(dict(self._session.interventions))

    @property
    def supervised(self) -> bool:
        """Whether a supervisor guards the joint targets (the contract's, or the one given)."""
        return self._session.supervised

    @property
    def supervisor(self) -> SupervisorState:
        """Row 0's supervisor state after the last step (:meth:`supervisor_row` for another);
        :class:`tdaot.InvalidArgumentError` without a supervisor."""
        return SupervisorState(*self._session.supervisor(0))

    def supervisor_row(self, row: int) -> SupervisorState:
        """Row ``row``'s supervisor state after the last step."""
        return SupervisorState(*self._session.supervisor(row))

    def step(self, inputs: Inputs | None = None, /, **tensors: torch.Tensor) -> TensorDict:
        """Runs one step; returns every output (the state outputs included) as a TensorDict."""
        with naming_given_keys(self._in_keys, inputs):
            outputs = self._session.step(keyed_inputs(self._in_keys, inputs, tensors))
        return as_tensordict(self._out_keys, outputs)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Zeroes the state, marks is_init and forgets the previous outputs (the next step is not
        rate limited): for every row, or where the bool [batch] mask is true."""
        self._session.reset(mask)

    def __repr__(self) -> str:
        return f"Session({self.path!r}, batch={self.batch})"
