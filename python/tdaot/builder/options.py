"""BuildOptions: every option of a build, once, with its type, default, check and meaning.

``tdaot.build``'s keywords, the ``tdaot build`` flags (tdaot.cli), the keys of a CI config
file (tdaot.builder.config) and the artifact cache key (tdaot.builder.cache) are all derived
from the fields below; adding an option means adding a field (and its tests).

Each front end says a refused value in its own syntax (``tuning='fast' is not one of
'throughput', 'latency'`` for Python, ``field 'tuning': 'fast' is not one of throughput,
latency`` in a TOML config); the check and the words come from the field.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from tensordict.nn import InteractionType

from tdaot import keys as keyutil
from tdaot.builder.factories import load_factory
from tdaot.builder.targets import CPU_TARGETS
from tdaot.builder.tuning import DEFAULT_TUNING, TUNINGS
from tdaot.contract import Contract
from tdaot.errors import BuildError, ContractError, FactoryError

BatchSpec = Union[str, int, tuple[int, int]]

INTERACTION_TYPES = tuple(t.value for t in InteractionType)
DEVICES = ("cpu", "cuda")


class Invalid(ValueError):
    """A value an option refuses. Exactly one of: ``expected`` (what a valid value looks
    like), ``choices`` (the valid values), ``problem`` (what is wrong, said after the value),
    ``detail`` (the whole story, for values too big to repeat: a contract)."""

    def __init__(
        self, *, expected: str = "", choices: Sequence[str] = (), problem: str = "", detail: str = ""
    ) -> None:
        super().__init__(expected or problem or detail or f"one of {choices}")
        self.expected, self.choices, self.problem, self.detail = expected, tuple(choices), problem, detail

    def python_message(self, name: str, value: Any) -> str:
        """The message as a Python caller reads it: ``name=value ...``."""
        if self.detail:
            return f"{name}: {self.detail}"
        if self.choices:
            return f"{name}={value!r} is not one of {', '.join(map(repr, self.choices))}"
        if self.problem:
            return f"{name}={value!r} {self.problem}"
        return f"{name}={value!r}: {self.expected}"

    def config_message(self, key: str, value: Any) -> str:
        """The message as a config file's author reads it: ``field 'key': ...``."""
        if self.detail:
            return f"field {key!r}: {self.detail}"
        if self.choices:
            return f"field {key!r}: {value!r} is not one of {', '.join(self.choices)}"
        if self.problem:
            return f"field {key!r}: {value!r} {self.problem}"
        return f"field {key!r}: {self.expected}, got {value!r}"


class OptionError(BuildError):
    """A build option refused: ``option`` names it, ``value`` is what was given."""

    def __init__(self, option: str, value: Any, invalid: Invalid) -> None:
        super().__init__(invalid.python_message(option, value))
        self.option, self.value, self.invalid = option, value, invalid


def one_of(*choices: str) -> Callable[[Any, Any], Any]:
    def check(value, options):
        if not isinstance(value, str) or value not in choices:
            raise Invalid(choices=choices)
        return value

    return check


def _check_out_keys(value, options):
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]  # one key; a tuple or list holds several (each a str or a tuple)
    keys = tuple(dict.fromkeys(keyutil.as_tuple(k) for k in value))
    if not keys:
        raise Invalid(expected="at least one out key (or None for the module's)")
    return keys


def check_batch(value, options=None) -> BatchSpec:
    """'dynamic', 'static', a batch size, or a (min, max) pair with 1 <= min <= max."""
    if value in ("dynamic", "static"):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        low = high = value
    elif (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) for b in value)
    ):
        low, high = value
        value = (low, high)
    else:
        raise Invalid(expected="expected 'dynamic', 'static', a batch size, or a (min, max) pair")
    if not 1 <= low <= high:
        raise Invalid(expected="need 1 <= min <= max")
    return value


def _check_kernel_threads(value, options):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Invalid(expected="expected 0 (decided at run time) or a count >= 1")
    return value


def _check_tuning(value, options):
    one_of(*TUNINGS)(value, options)
    if value != DEFAULT_TUNING and options.device != "cpu":
        raise Invalid(problem=f"is for CPU packages (device is {options.device!r})")
    return value


def _check_specialize(value, options):
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in value
    ):
        raise Invalid(expected="expected batch sizes >= 1 (e.g. [1, 4]), or none")
    if value and options.tuning != "auto":
        raise Invalid(problem=f"applies to tuning='auto' only (tuning is {options.tuning!r})")
    return tuple(sorted(set(value)))


def _check_sign_key(value, options):
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise Invalid(expected="expected the path of an Ed25519 private key (PEM, from tdaot keygen)")
    if "-----BEGIN" in os.fspath(value):
        # Not through Invalid, whose message quotes the value: the key must not reach a log.
        raise BuildError(
            "sign_key holds key material; give the path of the private key file instead, so the key "
            "never appears in logs, reports or a process list"
        )
    return os.fspath(value)


def _specialize_from_text(text: str) -> tuple[int, ...]:
    """The command line's sizes: "1,4" (or "" for none)."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{text!r}: expected batch sizes separated by commas, e.g. 1,4") from None


def _check_flag(value, options):
    if not isinstance(value, bool):
        raise Invalid(expected="expected true or false")
    return value


def _batch_from_text(text: str) -> BatchSpec:
    """The command line's batch: dynamic, static, N or MIN:MAX."""
    if text in ("dynamic", "static"):
        return text
    low, sep, high = text.partition(":")
    try:
        return (int(low), int(high)) if sep else int(low)
    except ValueError:
        raise ValueError(f"{text!r}: expected dynamic, static, a batch size N, or MIN:MAX") from None


def _batch_from_config(value):
    if isinstance(value, list):
        if len(value) != 2 or not all(isinstance(b, int) for b in value):
            raise Invalid(expected="expected [min, max]")
        return tuple(value)
    if value not in ("dynamic", "static") and not (isinstance(value, int) and not isinstance(value, bool)):
        raise Invalid(expected="expected 'dynamic', 'static', a size or [min, max]")
    return value


def _out_keys_from_config(value):
    if not isinstance(value, list) or not all(isinstance(k, str) and k for k in value):
        raise Invalid(expected="expected a list of keys like 'a.b'")
    return tuple(keyutil.from_manifest(k) for k in value)


def _check_contract(value, options):
    if value is not None and not isinstance(value, Contract):
        raise Invalid(expected="expected a tdaot.Contract, or None")
    return value


def _contract_from_config(value) -> Contract:
    try:
        return Contract.from_dict(value, "contract")
    except ContractError as err:
        raise Invalid(detail=str(err)) from None


def _contract_from_text(text: str) -> Contract:
    """The command line's contract: a TOML or JSON file of its fields, or FILE.py:FUNCTION
    (MODULE:FUNCTION) returning a tdaot.Contract."""
    try:
        if ":" not in text or text.endswith((".toml", ".json")):
            return Contract.load(text)
        contract = load_factory(text)()
    except (ContractError, FactoryError) as err:
        raise ValueError(str(err)) from None
    if not isinstance(contract, Contract):
        raise ValueError(f"{text!r} returned {type(contract).__name__}, not a tdaot.Contract")
    return contract


def option(
    default: Any,
    doc: str,
    check: Callable[[Any, Any], Any] | None = None,
    *,
    choices: Sequence[str] = (),
    metavar: str | None = None,
    cli_flag: str | None = None,
    from_text: Callable[[str], Any] | None = None,
    from_config: Callable[[Any], Any] | None = None,
    in_artifact: bool = True,
    shown_default: str | None = None,
) -> Any:
    """A BuildOptions field, checked by ``check(value, options)`` (default: one of ``choices``),
    which returns the value normalised or raises Invalid. ``from_text`` parses the command
    line's string (None: the text as it is; a bool is a switch); ``from_config`` turns a TOML
    value into the Python one; ``in_artifact`` is False for options that do not change the
    package (kept out of the cache key); ``shown_default`` is the default as the ``--help`` text
    and the docs' option table show it, where the field's own (None) stands for another value."""
    return field(
        default=default,
        metadata={
            "doc": doc,
            "check": check or one_of(*choices),
            "choices": tuple(choices),
            "metavar": metavar,
            "cli_flag": cli_flag,
            "from_text": from_text,
            "from_config": from_config,
            "in_artifact": in_artifact,
            "shown_default": shown_default,
        },
    )


@dataclass(frozen=True)
class BuildOptions:
    """How a policy is built. Every field is a keyword of ``tdaot.build``, a ``tdaot build`` flag
    and a key of a CI config's ``[defaults]``/``[[artifact]]`` (``cpu_target`` as the list
    ``cpu_targets`` there). Values are checked and normalised on construction (BuildError)."""

    out_keys: tuple[tuple[str, ...], ...] | None = option(
        None,
        "out keys to export (nested as a tuple, 'a.b' on the command line); default: the module's",
        _check_out_keys,
        metavar="KEY",
        cli_flag="--out-key",
        from_text=keyutil.from_manifest,
        from_config=_out_keys_from_config,
    )
    batch: BatchSpec = option(
        "dynamic",
        "batch sizes served: dynamic (1..1048576), static (the example's), N, or (MIN, MAX)",
        check_batch,
        metavar="dynamic|static|N|MIN:MAX",
        from_text=_batch_from_text,
        from_config=_batch_from_config,
    )
    interaction_type: str = option(
        "deterministic",
        "tensordict interaction type the policy is exported under",
        choices=INTERACTION_TYPES,
    )
    device: str = option("cpu", "device the package runs on", choices=DEVICES)
    cpu_target: str = option(
        "native",
        "instructions the CPU kernels may use: the build host's (native) or an x86-64 level",
        choices=tuple(CPU_TARGETS),
    )
    kernel_threads: int = option(
        1,
        "OpenMP threads compiled into the kernels: 1 (serial), N, or 0 (decided at run time)",
        _check_kernel_threads,
        metavar="N",
        from_text=int,
    )
    tuning: str = option(
        DEFAULT_TUNING,
        "auto (a throughput model for every batch plus a static model per specialize batch: "
        "latency tuned up to 16 rows, throughput tuned above), throughput (ATen's GEMM and RNN "
        "kernels) or latency (inductor's C++ GEMM "
        "template, recurrent layers decomposed: faster at batch 1, slower at large batch; CPU only)",
        _check_tuning,
        choices=TUNINGS,
        in_artifact=False,  # each model's tuning is in its own cache key (tdaot.builder.tuning.ModelPlan)
    )
    specialize: tuple[int, ...] | None = option(
        None,
        "batch sizes that get their own static model under tuning='auto': latency "
        "tuned up to 16 rows, throughput tuned above, a large batch traced in chunks of rows",
        _check_specialize,
        metavar="N[,N...]",
        from_text=_specialize_from_text,
        in_artifact=False,
        shown_default="1",  # None: tdaot.builder.tuning.DEFAULT_SPECIALIZE
    )
    exact_math: bool = option(
        False,
        "no change to results beyond torch's own: no 3.5-ulp tanh on AVX2, no division by a constant "
        "as a multiplication, no narrow linear layer padded 16 wide, no wide one on oneDNN on AVX-512 "
        "(slower; the manifest's numerics lists what a package takes)",
        _check_flag,
    )
    contract: Contract | None = option(
        None,
        "the robot deployment contract compiled into the package (tdaot.Contract; on the command "
        "line a TOML or JSON file of its fields, or FILE.py:FUNCTION returning one)",
        _check_contract,
        metavar="FILE|FILE.py:FUNCTION",
        from_text=_contract_from_text,
        from_config=_contract_from_config,
    )
    caller_terms: bool = option(
        False,
        "the caller writes every slot of the contract's last_action terms and terms with history "
        "itself (default: the runner carries them as recurrent state, and the caller writes only "
        "the newest step of a history term)",
        _check_flag,
    )
    sign_key: str | None = option(
        None,
        "sign the package with this Ed25519 private key (a PEM file from tdaot keygen; relative to "
        "the config file in a config); default: unsigned",
        _check_sign_key,
        metavar="KEY.pem",
        in_artifact=False,  # the compiled package is the same; signing adds an entry afterwards
    )
    require_lite: bool = option(
        False,
        "fail the build unless every specialised (latency) model runs on the lite runtime "
        "(tdaot::lite, no libtorch); without it such a model is built with a LiteWarning",
        _check_flag,
        in_artifact=False,  # a check of the package, which it does not change
    )
    save_exported: bool = option(
        False,
        "also write the torch.export program beside the package (NAME.ep.pt2)",
        _check_flag,
        in_artifact=False,
    )

    def __post_init__(self) -> None:
        for spec in fields():
            value = getattr(self, spec.name)
            try:
                normalised = spec.metadata["check"](value, self)
            except Invalid as err:
                raise OptionError(spec.name, value, err) from None
            object.__setattr__(self, spec.name, normalised)

    def replace(self, **changes: Any) -> BuildOptions:
        return dataclasses.replace(self, **changes)

    def as_kwargs(self) -> dict[str, Any]:
        """Every option as ``tdaot.build`` keywords."""
        return {spec.name: getattr(self, spec.name) for spec in fields()}

    def artifact_key(self) -> dict[str, Any]:
        """The options that change what the package holds, for the artifact cache key."""
        return {spec.name: getattr(self, spec.name) for spec in fields() if spec.metadata["in_artifact"]}


def fields() -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(BuildOptions)
