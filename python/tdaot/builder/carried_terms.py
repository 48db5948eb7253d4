"""The contract's last_action terms and terms with history > 1, carried by the runner as
recurrent state (issue: the runner, not the caller, keeps the previous raw action and the
history windows). The export wrapper (tdaot.builder.export.PositionalPolicy) writes the carried
slots into the observation before the policy runs and returns the next state; every runner
(Session, bound run, lite binding) already carries recurrent state, reset masks included.
``caller_terms=True`` (BuildOptions) turns this off for a caller that computes them itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tdaot import keys as keyutil
from tdaot.contract import Contract
from tdaot.errors import BuildError, ManifestError
from tdaot.manifest import Manifest, TensorSpec, dtype_name


@dataclass(frozen=True)
class CarriedTerm:
    """One last_action term, or one term with history > 1, of an input signal: its slots
    ``[start, start + size * history)`` of input ``input`` (oldest step first)."""

    input: int  # the wrapper's input index of the observation
    start: int
    size: int
    history: int
    action: int | None  # last_action: the wrapper's output index of its joint output signal
    last_action_state: int | None  # the state index of the previous raw action (last_action)
    history_state: int | None  # the state index of the window (history > 1)


@dataclass(frozen=True)
class CarriedTerms:
    """The contract's last_action and history terms, carried by the runner as recurrent state:
    ``keys`` the state inputs (each with its ``next.`` output), then ``is_init`` when the wrapper
    adds that input (``is_init_input`` is the wrapper's input index of the flag either way)."""

    terms: tuple[CarriedTerm, ...]
    keys: tuple[str, ...]
    specs: tuple[TensorSpec, ...]  # of the state inputs (dtype and per-sample shape)
    is_init_input: int | None  # the wrapper's input index of is_init (None: not needed)
    adds_is_init: bool

    def fill(self, tensors: list[torch.Tensor], state: Sequence[torch.Tensor]) -> list:
        """Writes the carried slots into the observations in ``tensors`` (in place of the
        list); returns each term's window, for :meth:`next_state`."""
        everything = [*tensors, *state]
        new = None
        if self.is_init_input is not None:
            flag = everything[self.is_init_input]
            new = (flag.reshape(flag.shape[0], -1) if flag.dim() > 1 else flag.unsqueeze(1)).any(
                1, keepdim=True
            )
        windows = []
        replaced: dict[int, list[tuple[int, int, torch.Tensor]]] = {}
        for term in self.terms:
            obs = tensors[term.input]
            end = term.start + term.size * term.history
            if term.last_action_state is not None:
                newest = state[term.last_action_state].to(obs.dtype)
                if new is not None:
                    newest = torch.where(new, torch.zeros_like(newest), newest)
            else:
                newest = obs[:, end - term.size : end]
            if term.history_state is not None:
                older = state[term.history_state][:, term.size :]
                window = torch.cat([older, newest], dim=1)
                if new is not None:
                    window = torch.where(new, newest.repeat(1, term.history), window)
            else:
                window = newest
            windows.append(window)
            replaced.setdefault(term.input, []).append((term.start, end, window))
        for index, pieces in replaced.items():
            obs, parts, at = tensors[index], [], 0
            for start, end, window in sorted(pieces, key=lambda piece: piece[0]):
                parts += [obs[:, at:start], window]
                at = end
            parts.append(obs[:, at:])
            tensors[index] = torch.cat(parts, dim=1)
        return windows

    def next_state(self, tensors, raw: Sequence[torch.Tensor], windows: list) -> tuple[torch.Tensor, ...]:
        """The next step's state, in ``keys`` order: each previous raw action, each window."""
        out: list[torch.Tensor | None] = [None] * len(self.keys)
        for term, window in zip(self.terms, windows):
            if term.last_action_state is not None:
                out[term.last_action_state] = raw[term.action].to(window.dtype)
            if term.history_state is not None:
                out[term.history_state] = window
        return tuple(out)

    def run(self, tensors: Sequence[torch.Tensor], count: int, policy) -> tuple[torch.Tensor, ...]:
        """One step of the package around ``policy``: ``tensors`` are the wrapper's inputs (the
        policy's ``count`` inputs, then the state in ``keys`` order and the added is_init, as the
        manifest lists them). The carried slots are written into the observations, then
        ``policy(observations)`` gives (its outputs, its raw outputs before the contract's map
        and clip); returns its outputs followed by the next state (the package's outputs)."""
        observations, state = list(tensors[:count]), tensors[count:]
        windows = self.fill(observations, state)
        outputs, raw = policy(observations)
        return (*outputs, *self.next_state(observations, raw, windows))


#: The first part of every state key the carried terms add (a policy's own keys must not use it).
CARRY_PREFIX = "tdaot"


def carried_terms(
    contract: Contract | None,
    in_keys: Sequence[tuple[str, ...]],
    out_keys: Sequence[tuple[str, ...]],
    tensors: Sequence[torch.Tensor],
) -> CarriedTerms | None:
    """The state that carries ``contract``'s last_action terms and terms with history > 1 for
    a policy with ``in_keys`` (example ``tensors``) and ``out_keys``; None when there is none."""
    if contract is None:
        return None
    manifest_in = [keyutil.to_manifest(k) for k in in_keys]
    manifest_out = [keyutil.to_manifest(k) for k in out_keys]
    terms, keys, specs = [], [], []
    needs_is_init = False
    for index, key in enumerate(manifest_in):
        signal = contract.inputs.get(key)
        if signal is None or not signal.terms:
            continue
        names = [t.name for t in signal.terms]
        start = 0
        for term in signal.terms:
            span = term.size * term.history
            carried = term.name == "last_action" or term.history > 1
            if not carried:
                start += span
                continue
            label = term.name
            if names.count(term.name) > 1:  # one per joint output signal
                label += "@" + (term.output or sorted(contract.outputs)[0]).replace(keyutil.SEPARATOR, ":")
            dtype = dtype_name(tensors[index].dtype)
            action = la_state = hist_state = None
            if term.name == "last_action":
                output = term.output if term.output is not None else sorted(contract.outputs)[0]
                if output not in manifest_out:
                    raise BuildError(
                        f"contract input {key!r}: term {term.name!r} follows output {output!r}, which "
                        f"is not one of the package's out keys ({', '.join(manifest_out)}); the runner "
                        "carries the previous raw action from it (or build with caller_terms=True)"
                    )
                action = manifest_out.index(output)
                la_state = len(keys)
                keys.append(keyutil.SEPARATOR.join((CARRY_PREFIX, "last_action", key, label)))
                specs.append(TensorSpec(keys[-1], dtype, (term.size,)))
            if term.history > 1:
                needs_is_init = True
                hist_state = len(keys)
                keys.append(keyutil.SEPARATOR.join((CARRY_PREFIX, "history", key, label)))
                specs.append(TensorSpec(keys[-1], dtype, (span,)))
            terms.append(CarriedTerm(index, start, term.size, term.history, action, la_state, hist_state))
            start += span
    if not terms:
        return None
    taken = {*manifest_in, *manifest_out}
    clash = next((k for k in keys if k in taken or f"next.{k}" in taken), None)
    if clash is None:
        clash = next((k for k in taken if keyutil.from_manifest(k)[0] == CARRY_PREFIX), None)
    if clash is not None:
        raise BuildError(
            f"the policy's key {clash!r} starts with {CARRY_PREFIX!r}, which the state that carries the "
            "contract's last_action and history terms uses; rename it, or build with caller_terms=True"
        )
    is_init = next(
        (i for i, k in enumerate(in_keys) if k[-1] == "is_init" and tensors[i].dtype == torch.bool),
        None,
    )
    adds = False
    if is_init is None and needs_is_init:
        if "is_init" in manifest_in:
            raise BuildError(
                "the policy's input 'is_init' is not bool; the history terms of its contract need a "
                "bool is_init to refill after a reset (or build with caller_terms=True)"
            )
        is_init, adds = len(in_keys) + len(keys), True
    return CarriedTerms(tuple(terms), tuple(keys), tuple(specs), is_init, adds)


def policy_keys(manifest: Manifest) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The policy's own in and out keys (manifest keys) of a built package: its inputs and
    outputs before the state the carried terms add (and the is_init added with it)."""
    inputs = [spec.key for spec in manifest.inputs]
    outputs = [spec.key for spec in manifest.outputs]
    first_in = next((i for i, k in enumerate(inputs) if _carried(keyutil.from_manifest(k))), len(inputs))
    first_out = next(
        (i for i, k in enumerate(outputs) if _carried(keyutil.from_manifest(k)[1:])), len(outputs)
    )
    return tuple(inputs[:first_in]), tuple(outputs[:first_out])


def _carried(key: tuple[str, ...]) -> bool:
    return len(key) > 1 and key[0] == CARRY_PREFIX and key[1] in ("last_action", "history")


def carried_terms_of(manifest: Manifest) -> CarriedTerms | None:
    """The carried terms of a built package, rebuilt from its manifest (its contract, and the
    policy's own keys and dtypes) exactly as its build made them; None when it carries none
    (built with ``caller_terms=True``, or no such term). What the eager replay of a flight log
    runs the policy inside (tdaot.testing.flight_replay)."""
    in_keys, out_keys = policy_keys(manifest)
    if manifest.contract is None or len(in_keys) == len(manifest.inputs):
        return None
    specs = {spec.key: spec for spec in manifest.inputs}
    tensors = [torch.zeros(1, *specs[k].shape, dtype=specs[k].torch_dtype) for k in in_keys]
    carry = carried_terms(
        manifest.contract,
        [keyutil.from_manifest(k) for k in in_keys],
        [keyutil.from_manifest(k) for k in out_keys],
        tensors,
    )
    added = [spec.key for spec in manifest.inputs[len(in_keys) :]]
    expected = [*carry.keys, *(["is_init"] if carry.adds_is_init else [])] if carry else []
    if added != expected:
        raise ManifestError(
            f"the package's carried state ({', '.join(added)}) is not what its contract's last_action "
            f"and history terms make ({', '.join(expected) or 'none'}): a manifest of another tdaot"
        )
    return carry
