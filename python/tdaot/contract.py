"""The robot deployment contract: the facts a service and a policy must agree on, carried in the
package (the manifest's ``contract``, covered by its digest) rather than kept beside it by hand::

    tdaot.Contract(
        control_dt=0.02,                                    # seconds per step, > 0
        inputs={"observation": tdaot.Signal(names=OBS_NAMES, scale=OBS_SCALE, low=-100.0, high=100.0)},
        outputs={"action": tdaot.Signal(names=JOINTS, scale=0.25, offset=DEFAULT_POS,
                                         low=LOWER, high=UPPER, max_delta=0.1)},
        metadata={"robot": "go2", "policy": "flat-walk-v3"},
    )

A :class:`Signal` describes one key whose per-sample shape is ``[n]``: the name of each element
and ``value = clip(raw * scale + offset, low, high)``. For an input, ``raw`` is what the caller
passes and ``value`` what the policy sees; for an output, ``raw`` is what the policy computes and
``value`` what the caller gets. ``scale``, ``offset``, ``low``, ``high`` and ``max_delta`` are each
one number or ``n`` numbers; without ``low``/``high`` nothing is clipped. The map and the clip
are compiled into the package (every run path applies them); ``max_delta``, the most an output
element moves per step, is applied by a :class:`tdaot.Session`.

An input Signal may instead be a concatenation of observation :class:`Term` s, each a physical
quantity of a documented vocabulary (docs/contract.md) with its own map, clip and history::

    tdaot.Signal(terms=[tdaot.Term("base_ang_vel", scale=0.25), tdaot.Term("projected_gravity"),
                        tdaot.Term("velocity_commands"), tdaot.Term("joint_pos_rel"),
                        tdaot.Term("joint_vel_rel", scale=0.05), tdaot.Term("last_action"),
                        tdaot.Term("gait_phase", period=0.8)])

Its ``names`` ("base_ang_vel.x", "joint_pos_rel.left_knee_joint", "...@-1" for older steps of a
term with history) and its per-element scale, offset, low and high are derived from the terms
when the Contract is made. An output Signal of joint targets may carry PD gains,
``stiffness`` and ``damping`` (one number or one per joint), for a service or a rehearsal to
apply; the runner does not.

Every mistake is a :class:`tdaot.ContractError` naming the key and the field, raised when the
Contract is made or, for what depends on the policy (keys, shapes), by ``tdaot.build``. The C++
manifest parser (cpp/src/core/manifest/manifest_contract.cpp) checks the same rules when a package is read.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tdaot import _C
from tdaot import keys as keyutil
from tdaot.contract_signal import (
    GAIN_FIELDS,
    HISTORY_LAYOUTS,
    SIGNAL_FIELDS,
    VALUE_FIELDS,
    Signal,
)
from tdaot.contract_supervisor import Supervisor, check_supervisor
from tdaot.contract_terms import (
    TERM_ELEMENTS,  # noqa: F401 - re-exported: the vocabulary is part of tdaot.contract
    TERM_PARAMS,  # noqa: F401
    Term,  # noqa: F401 - re-exported with Signal
    Values,
    checked_term,
    describe_contract,
    term_elements,
    term_from_dict,
)
from tdaot.errors import ContractError, KeyNameError


@dataclass(frozen=True)
class Contract:
    """The deployment contract of a package: ``control_dt`` (seconds per step, > 0), the
    :class:`Signal` of some input and output keys (manifest keys "a.b" or tuples), and free-form
    string ``metadata``. Pass it to ``tdaot.build(..., contract=...)``; a loaded package's is
    ``native.contract``."""

    control_dt: float
    # Dicts: compared, never hashed (BuildOptions, which holds a Contract, stays hashable).
    inputs: Mapping[str, Signal] = field(default_factory=dict, hash=False)
    outputs: Mapping[str, Signal] = field(default_factory=dict, hash=False)
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: The supervisor of the joint targets (soft start, limits, fallback); None: none.
    supervisor: Supervisor | None = None

    def __post_init__(self) -> None:
        dt = self.control_dt
        if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not math.isfinite(dt) or dt <= 0:
            raise ContractError(f"contract field 'control_dt': expected seconds per step > 0, got {dt!r}")
        object.__setattr__(self, "control_dt", float(dt))
        # The outputs first: a joint term of an input has the joint output signal's names.
        outputs = _signals("outputs", self.outputs, None)
        object.__setattr__(self, "inputs", _signals("inputs", self.inputs, outputs))
        object.__setattr__(self, "outputs", outputs)
        metadata = self.metadata
        if not isinstance(metadata, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise ContractError(
                f"contract field 'metadata': expected a mapping of strings to strings, got {metadata!r}"
            )
        object.__setattr__(self, "metadata", dict(metadata))
        if self.supervisor is not None:
            check_supervisor(self.supervisor, self.inputs, self.outputs)

    def signal(self, key: keyutil.NestedKey) -> Signal | None:
        """The signal of ``key``: an input's, else an output's; None when the contract has none."""
        key = _manifest_key(key, "contract")
        return self.inputs.get(key) or self.outputs.get(key)

    def order(self, key: keyutil.NestedKey, names: Sequence[str]) -> list[int]:
        """For a service's own element names of ``key``: ``result[i]`` is the policy's index of
        ``names[i]``, so ``action[:, result]`` is the policy's output in the service's order and
        ``obs[:, result] = service_obs`` puts the service's values in the policy's order. Raises
        ContractError when the contract has no signal ``key`` or ``names`` is not a permutation of
        the policy's (naming the first missing and the first extra name)."""
        signal = self.signal(key)
        manifest_key = _manifest_key(key, "contract")
        if signal is None:
            known = ", ".join([*self.inputs, *self.outputs]) or "none"
            raise ContractError(
                f"the contract has no signal {manifest_key!r} (it has: {known})", manifest_key
            )
        return list(_C.order_names(manifest_key, list(signal.names), [str(n) for n in names]))

    def check_specs(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        """Checks the contract against a policy's manifest specs (TensorSpec: key, dtype,
        shape): every key one of them, floating, of per-sample shape [n] with n names."""
        for section, specs in (("inputs", inputs), ("outputs", outputs)):
            by_key = {spec.key: spec for spec in specs}
            for key, signal in getattr(self, section).items():
                where = f"contract {section[:-1]} {key!r}"
                spec = by_key.get(key)
                if spec is None:
                    raise ContractError(
                        f"{where}: not one of the policy's {section} ({', '.join(by_key)})", key
                    )
                if not spec.dtype.startswith(("float", "bfloat")):
                    raise ContractError(
                        f"{where}: is {spec.dtype}; a signal scales and clips floating-point values", key
                    )
                if len(spec.shape) != 1:
                    raise ContractError(
                        f"{where}: has per-sample shape {list(spec.shape)}; a signal describes a "
                        "one-dimensional [n] key",
                        key,
                    )
                if spec.shape[0] != len(signal.names) and signal.terms:
                    sizes = " + ".join(
                        f"{t.name} {t.size}" + (f"x{t.history}" if t.history > 1 else "")
                        for t in signal.terms
                    )
                    raise ContractError(
                        f"{where}: field 'terms': the terms have {len(signal.names)} elements "
                        f"({sizes}), but the policy's {key!r} has {spec.shape[0]} elements",
                        key,
                    )
                if spec.shape[0] != len(signal.names):
                    raise ContractError(
                        f"{where}: field 'names' has {len(signal.names)} names, but the policy's "
                        f"{key!r} has {spec.shape[0]} elements",
                        key,
                    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "control_dt": self.control_dt,
            "inputs": {key: signal.to_dict() for key, signal in self.inputs.items()},
            "outputs": {key: signal.to_dict() for key, signal in self.outputs.items()},
            "metadata": dict(self.metadata),
            **({"supervisor": self.supervisor.to_dict()} if self.supervisor is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Any, origin: str = "contract") -> Contract:
        """The Contract of a dict as :meth:`to_dict` writes it (a manifest's, a TOML table)."""
        if not isinstance(data, Mapping):
            raise ContractError(f"{origin}: expected a table of contract fields, got {data!r}")
        unknown = sorted(set(data) - {"control_dt", "inputs", "outputs", "metadata", "supervisor"})
        if unknown:
            raise ContractError(
                f"{origin}: unknown field {unknown[0]!r} "
                "(known: control_dt inputs outputs metadata supervisor)"
            )
        if "control_dt" not in data:
            raise ContractError(f"{origin}: field 'control_dt' is missing")
        sections = {}
        for section in ("inputs", "outputs"):
            entries = data.get(section) or {}
            if not isinstance(entries, Mapping):
                raise ContractError(
                    f"{origin}: field {section!r}: expected a table of signals by key, got {entries!r}"
                )
            sections[section] = {
                key: _signal_from_dict(f"{origin} {section[:-1]} {key!r}", value)
                for key, value in entries.items()
            }
        supervisor = data.get("supervisor")
        if supervisor is not None:
            supervisor = Supervisor.from_dict(supervisor, f"{origin} supervisor")
        return cls(data["control_dt"], metadata=data.get("metadata") or {}, supervisor=supervisor, **sections)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Contract:
        """The contract in a TOML file (JSON when the name ends in .json) of its fields."""
        path = os.fspath(path)
        kind = "JSON" if path.endswith(".json") else "TOML"
        try:
            with open(path, "rb") as file:
                data = json.load(file) if kind == "JSON" else tomllib.load(file)
        except OSError as err:
            raise ContractError(f"cannot read contract file {path!r}: {err.strerror}") from None
        except ValueError as err:  # JSONDecodeError and TOMLDecodeError both are
            raise ContractError(f"contract file {path!r} is not valid {kind}: {err}") from None
        return cls.from_dict(data, f"contract file {path!r}")

    @classmethod
    def from_deploy(
        cls,
        path: str | os.PathLike,
        *,
        joint_names: Sequence[str] | None = None,
        mjcf: str | os.PathLike | None = None,
        **options: Any,
    ) -> Contract:
        """The contract of a trained run's deployment file: unitree_rl_lab's / Isaac Lab's
        ``deploy.yaml``, or an ONNX file (``.onnx``) with mjlab's ``metadata_props``.
        ``joint_names`` (the robot's joint order) or ``mjcf`` (its actuated joints) name a
        deploy.yaml's joints, which it gives by index (``joint_ids_map``). ``options``:
        ``input_key`` ("policy"), ``output_key`` ("action"), ``control_dt`` (for an ONNX export
        without its run's env.yaml), ``env_yaml`` (None: ``params/env.yaml`` of the run when
        there is one, whose training armature the metadata records; False: none). Every field a
        file holds that tdaot cannot carry exactly is refused with a ContractError naming it
        (docs/from-training.md)."""
        # The readers return fields, not a Contract, so they need not import this module.
        from tdaot.trained.deploy import contract_fields_from_deploy

        return cls(**contract_fields_from_deploy(path, joint_names=joint_names, mjcf=mjcf, **options))

    def describe(self) -> list[str]:
        """The contract as indented lines (tdaot inspect)."""
        lines = describe_contract(self, VALUE_FIELDS, GAIN_FIELDS)
        return lines + (self.supervisor.describe() if self.supervisor is not None else [])


def _manifest_key(key: Any, where: str) -> str:
    try:
        return keyutil.to_manifest(key)
    except KeyNameError as err:
        raise ContractError(f"{where}: {err}") from None


def _signal_from_dict(where: str, data: Any) -> Signal:
    if not isinstance(data, Mapping):
        raise ContractError(f"{where}: expected a table of signal fields, got {data!r}")
    unknown = sorted(set(data) - set(SIGNAL_FIELDS))
    if unknown:
        raise ContractError(f"{where}: unknown field {unknown[0]!r} (known: {' '.join(SIGNAL_FIELDS)})")
    data = {k: v for k, v in data.items() if v is not None}
    if "terms" in data:
        terms = data["terms"]
        if isinstance(terms, (str, bytes)) or not isinstance(terms, Sequence):
            raise ContractError(f"{where}: field 'terms': expected a list of terms, got {terms!r}")
        return Signal(
            **{**data, "terms": [term_from_dict(f"{where} term {i}", t) for i, t in enumerate(terms)]}
        )
    if "names" not in data:
        raise ContractError(f"{where}: field 'names' is missing")
    return Signal(**data)


def _signals(section: str, signals: Any, outputs: Mapping[str, Signal] | None) -> dict[str, Signal]:
    """The checked signals of `section`; `outputs` (the checked outputs) for the inputs' terms."""
    if not isinstance(signals, Mapping):
        raise ContractError(
            f"contract field {section!r}: expected a mapping of keys to Signals, got {signals!r}"
        )
    checked = {}
    for key, signal in signals.items():
        key = _manifest_key(key, f"contract {section}")
        where = f"contract {section[:-1]} {key!r}"
        if not isinstance(signal, Signal):
            raise ContractError(f"{where}: expected a tdaot.Signal, got {type(signal).__name__}", key)
        if signal.history_layout not in HISTORY_LAYOUTS:
            raise ContractError(
                f"{where}: field 'history_layout': unknown history layout {signal.history_layout!r} "
                f"(known: {' '.join(HISTORY_LAYOUTS)}: each term's steps together, oldest first)",
                key,
            )
        gain = next((n for n in GAIN_FIELDS if getattr(signal, n) is not None), None)
        if outputs is not None and gain is not None:
            raise ContractError(
                f"{where}: field {gain!r}: gains belong to an output signal of joint targets; "
                f"{key!r} is an input",
                key,
            )
        if signal.terms:
            if outputs is None:
                raise ContractError(
                    f"{where}: field 'terms': terms describe an input's observations; {key!r} is an output",
                    key,
                )
            signal = _resolve_terms(where, key, signal, outputs)
        else:
            _check_signal(where, key, signal)
        checked[key] = signal
    return checked


def _resolve_terms(where: str, key: str, signal: Signal, outputs: Mapping[str, Signal]) -> Signal:
    """The signal of `signal.terms` with its names and per-element values derived (each term
    checked); a signal already derived is given back equal."""
    terms = [checked_term(where, key, index, term, outputs) for index, term in enumerate(signal.terms)]
    names: list[str] = []
    values: dict[str, list[float]] = {n: [] for n in ("scale", "offset", "low", "high")}
    seen: set[tuple[str, str | None]] = set()
    for index, term in enumerate(terms):
        if (term.name, term.output) in seen:
            raise ContractError(f"{where}: term {index} {term.name!r}: field 'name': appears twice", key)
        seen.add((term.name, term.output))
        elements = term_elements(term, outputs)
        for step in range(term.history - 1, -1, -1):
            suffix = f"@-{step}" if step else ""
            for e, element in enumerate(elements):
                names.append(f"{term.name}.{element}{suffix}")
                for n, missing in (("scale", 1.0), ("offset", 0.0), ("low", -math.inf), ("high", math.inf)):
                    value = term.value(n, e)
                    values[n].append(missing if value is None else value)

    def collapse(items: list[float]) -> Values:
        return items[0] if all(v == items[0] for v in items) else tuple(items)

    derived = {
        "names": tuple(names),
        "scale": collapse(values["scale"]),
        "offset": collapse(values["offset"]),
        "low": collapse(values["low"]) if any(t.low is not None for t in terms) else None,
        "high": collapse(values["high"]) if any(t.high is not None for t in terms) else None,
    }
    unset = {"names": (), "scale": 1.0, "offset": 0.0, "low": None, "high": None}
    for name, value in derived.items():
        given = getattr(signal, name)
        if given != unset[name] and given != value:
            raise ContractError(
                f"{where}: field {name!r}: a signal of terms derives its names, and each term has "
                f"its own scale, offset, low and high; give terms or {name}, not both",
                key,
            )
    if signal.max_delta is not None:
        raise ContractError(f"{where}: field 'max_delta': a rate limit is for outputs, not terms", key)
    return Signal(**derived, terms=tuple(terms), history_layout=signal.history_layout)


def _check_signal(where: str, key: str, signal: Signal) -> None:
    def fail(name: str, problem: str):
        raise ContractError(f"{where}: field {name!r}: {problem}", key)

    names = signal.names
    if not isinstance(names, tuple) or not names or not all(isinstance(n, str) and n for n in names):
        fail("names", f"expected one or more non-empty strings, got {names!r}")
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        fail("names", f"{twice!r} appears twice")
    for name in (*VALUE_FIELDS, *GAIN_FIELDS):
        values = getattr(signal, name)
        if values is None:
            if name in ("scale", "offset"):
                fail(name, "expected a number or one per name, got None")
            continue
        items = values if isinstance(values, tuple) else (values,)
        if isinstance(values, tuple) and len(values) != len(names):
            each = "joint" if name in GAIN_FIELDS else "name"
            fail(name, f"has {len(values)} values, expected {len(names)} (one per {each}) or one number")
        if not all(isinstance(v, float) and math.isfinite(v) for v in items):
            fail(name, f"expected finite numbers, got {values!r}")
        if name in GAIN_FIELDS:
            negative = next((n for i, n in enumerate(names) if signal.value(name, i) < 0), None)
            if negative is not None:
                fail(name, f"{name} for {negative!r} is negative")
    for index, element in enumerate(names):
        low, high, delta = (signal.value(n, index) for n in ("low", "high", "max_delta"))
        if low is not None and high is not None and low > high:
            fail("low", f"low {low} > high {high} for {element!r}")
        if delta is not None and delta <= 0:
            fail("max_delta", f"max_delta {delta} for {element!r} is not > 0")
