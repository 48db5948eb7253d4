"""Build configuration files: many artifacts, each for one or more CPU targets.

``tdaot.toml`` (or ``[tool.tdaot]`` in a pyproject.toml)::

    [defaults]                       # optional; any artifact field
    output_dir = "dist"
    cpu_targets = ["native", "x86-64-v3"]

    [[artifact]]
    name = "tutorial"
    factory = "examples/policies.py:tutorial_policy"   # relative to the config file
    out_keys = ["sample"]            # default: the module's; nested keys as "a.b"
    batch = [1, 64]                  # "dynamic" (default), "static", N, or [min, max]
    interaction_type = "deterministic"
    device = "cpu"
    output = "{name}-{target}.pt2"   # in output_dir; default "{name}.pt2" for one target
    parity = true                    # check against the eager module after the build
    kernel_threads = 1               # OpenMP threads in the kernels; 0: decided at run time
    tuning = "throughput"            # or "latency" (batch-1 control loops; see tdaot.tuning)
    sign_key = "keys/private.pem"    # sign each package (relative to the config file)

    [[artifact]]
    name = "go2"
    rsl_rl = "runs/go2"              # an rsl_rl run directory instead of a factory (tdaot.from_rsl_rl)
    checkpoint = "model_1500.pt"     # optional: a file (relative to the run) or an iteration; default newest
    deploy = "runs/go2/params/deploy.yaml"  # optional; default the run's params/deploy.yaml if present
    mjcf = "robots/go2.xml"          # optional: the joint order for a deploy.yaml (or joint_names = [...])

    [[artifact]]
    name = "anymal"
    run = "logs/skrl/anymal/2026-11-28"  # a run of rsl_rl, skrl, rl_games or SB3 (tdaot.from_run)

The build option keys (and their checks) are BuildOptions' fields (tdaot.builder.options),
``cpu_target`` given as the list ``cpu_targets``; the other keys say which artifact and where.
Paths (factory files, rsl_rl run directories, deploy and mjcf files, sign_key) are relative to
the config file.
Every mistake is a ConfigError naming the artifact and the field.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tdaot.builder.factories import call_factory
from tdaot.builder.options import BuildOptions, Invalid, OptionError
from tdaot.builder.options import fields as option_fields
from tdaot.errors import ConfigError, InvalidArgumentError
from tdaot.trained.run import RslRlRun
from tdaot.trained.which_run import TrainedRun

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Keys that are not build options: which artifact, from where, to where, checked how.
_JOB_DEFAULTS = {"output_dir": "dist", "parity": True, "cpu_targets": [BuildOptions().cpu_target]}
# An rsl_rl run directory (tdaot.trained.run.RslRlRun) instead of a factory, and its options.
_RUN_FIELDS = ("checkpoint", "deploy", "mjcf", "joint_names")
_JOB_FIELDS = {"name", "factory", "output", "rsl_rl", "run", *_RUN_FIELDS, *_JOB_DEFAULTS}
# Build options by config key; cpu_target is the job field cpu_targets (one build per target).
_OPTION_FIELDS = {spec.name: spec for spec in option_fields() if spec.name != "cpu_target"}
_FIELDS = _JOB_FIELDS | set(_OPTION_FIELDS)


@dataclass(frozen=True)
class BuildSpec:
    """One artifact for one CPU target, as a build job."""

    name: str
    factory: str | None
    output: str
    parity: bool
    options: BuildOptions
    rsl_rl: RslRlRun | TrainedRun | None = None  # built from this run (rsl_rl or run) instead of a factory

    def load(self):
        """(module, example, options): from the factory, or from the rsl_rl run with its
        deployment file's contract in the options."""
        if self.rsl_rl is None:
            module, example = call_factory(self.factory)
            return module, example, self.options
        module, example, contract, _ = self.rsl_rl.load()
        options = self.options if contract is None else self.options.replace(contract=contract)
        return module, example, options

    @property
    def id(self) -> str:
        return f"{self.name}@{self.options.cpu_target}"

    def __getattr__(self, name: str) -> Any:
        # spec.cpu_target, spec.tuning, ...: the build options read through the spec.
        if name == "options":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.options, name)


def load_config(path: str | os.PathLike) -> list[BuildSpec]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise ConfigError(f"cannot read config {str(path)!r}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config {str(path)!r} is not valid TOML: {err}") from None
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("tdaot")
        if data is None:
            raise ConfigError(f"{str(path)!r} has no [tool.tdaot] table")
    return parse_config(data, base_dir=path.resolve().parent, origin=str(path))


def parse_config(data: dict[str, Any], base_dir: Path, origin: str) -> list[BuildSpec]:
    unknown = set(data) - {"defaults", "artifact"}
    if unknown:
        raise ConfigError(
            f"{origin}: unknown table(s) {sorted(unknown)}; expected [defaults] and [[artifact]]"
        )
    defaults = data.get("defaults", {})
    _check_fields(defaults, f"{origin}: [defaults]")
    entries = data.get("artifact")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{origin}: no [[artifact]] entries")
    specs: list[BuildSpec] = []
    for index, entry in enumerate(entries, start=1):
        where = f"{origin}: artifact #{index}" + (f" ({entry['name']!r})" if "name" in entry else "")
        specs.extend(_parse_entry({**_JOB_DEFAULTS, **defaults, **entry}, entry, base_dir, where))
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.output in seen:
            raise ConfigError(f"{origin}: {spec.id} and {seen[spec.output]} both write {spec.output!r}")
        seen[spec.output] = spec.id
    ids = [spec.id for spec in specs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ConfigError(f"{origin}: artifact names are not unique: {', '.join(duplicates)}")
    return specs


def _check_fields(entry: dict, where: str) -> None:
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field {unknown[0]!r}; known fields: {', '.join(sorted(_FIELDS))}"
        )


def _parse_entry(merged: dict, entry: dict, base_dir: Path, where: str) -> list[BuildSpec]:
    _check_fields(entry, where)

    def fail(field: str, message: str):
        raise ConfigError(f"{where}: field {field!r}: {message}")

    if "name" not in entry:
        fail("name", "missing")
    name = merged["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        fail("name", f"{name!r} must be letters, digits, '_', '.' or '-'")
    if "factory" in entry and "rsl_rl" in entry:
        fail("rsl_rl", "give either factory or rsl_rl (an rsl_rl run directory), not both")
    if "run" in entry and ("factory" in entry or "rsl_rl" in entry):
        fail("run", "give one of factory, rsl_rl or run (a run of any library), not several")
    if "factory" not in entry and "rsl_rl" not in entry and "run" not in entry:
        fail("factory", "missing (or rsl_rl: an rsl_rl run directory; or run: a run of any library)")
    factory, run = None, None
    if "factory" in entry:
        factory = merged["factory"]
        if not isinstance(factory, str) or ":" not in factory:
            fail("factory", f"{factory!r} must look like FILE.py:FUNCTION or MODULE:FUNCTION")
        source, _, function = factory.rpartition(":")
        if source.endswith(".py") and not os.path.isabs(source):
            factory = f"{base_dir / source}:{function}"
        for key in _RUN_FIELDS:
            if key in merged:
                fail(key, "applies to rsl_rl entries only (and run entries)")
    else:
        run = _trained_run(merged, base_dir, "contract" in merged, fail)

    if not isinstance(merged["parity"], bool):
        fail("parity", f"expected true or false, got {merged['parity']!r}")
    values = {}
    for key, spec in _OPTION_FIELDS.items():
        if key in merged:
            convert = spec.metadata["from_config"]
            try:
                values[key] = convert(merged[key]) if convert else merged[key]
            except Invalid as err:
                raise ConfigError(f"{where}: {err.config_message(key, merged[key])}") from None
    if isinstance(values.get("sign_key"), str) and not os.path.isabs(values["sign_key"]):
        values["sign_key"] = str(base_dir / values["sign_key"])  # like factory: beside the config
    targets = merged["cpu_targets"]
    if not isinstance(targets, list) or not targets:
        fail("cpu_targets", f"expected a non-empty list, got {targets!r}")
    try:
        options = [BuildOptions(**values, cpu_target=target) for target in targets]
    except OptionError as err:
        key = "cpu_targets" if err.option == "cpu_target" else err.option
        raise ConfigError(f"{where}: {err.invalid.config_message(key, err.value)}") from None
    template = merged.get("output", "{name}-{target}.pt2" if len(targets) > 1 else "{name}.pt2")
    if not isinstance(template, str) or not template.endswith(".pt2"):
        fail("output", f"{template!r} must be a file name ending in .pt2")
    if len(targets) > 1 and "{target}" not in template:
        fail("output", f"{template!r} must contain {{target}}: the artifact has {len(targets)} CPU targets")
    output_dir = Path(merged["output_dir"])
    if not output_dir.is_absolute():
        output_dir = base_dir / output_dir
    return [
        BuildSpec(
            name=name,
            factory=factory,
            output=str(output_dir / template.format(name=name, target=option.cpu_target)),
            parity=merged["parity"],
            options=option,
            rsl_rl=run,
        )
        for option in options
    ]


def _trained_run(merged: dict, base_dir: Path, has_contract: bool, fail) -> RslRlRun | TrainedRun:
    """The entry's rsl_rl run (``rsl_rl``) or run of any library (``run``), its paths taken
    relative to the config file."""

    def path(key: str) -> str | None:
        value = merged.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            fail(key, f"expected a path, got {value!r}")
        return value if os.path.isabs(value) else str(base_dir / value)

    checkpoint = merged.get("checkpoint")
    if checkpoint is not None and not (
        (isinstance(checkpoint, int) and not isinstance(checkpoint, bool) and checkpoint >= 0)
        or (isinstance(checkpoint, str) and checkpoint)
    ):
        fail("checkpoint", f"expected a file name or an iteration number, got {checkpoint!r}")
    names = merged.get("joint_names")
    if names is not None and (
        not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names)
    ):
        fail("joint_names", f"expected a list of joint names, got {names!r}")
    if has_contract and "deploy" in merged:
        fail("deploy", "give the contract once: contract or deploy, not both")
    key = "rsl_rl" if "rsl_rl" in merged else "run"
    run_dir = path(key)
    if isinstance(checkpoint, str) and not os.path.isabs(checkpoint):
        checkpoint = str(Path(run_dir) / checkpoint)  # like rsl_rl's own resume: a file of the run
    try:
        return (RslRlRun if key == "rsl_rl" else TrainedRun)(
            run_dir,
            checkpoint=checkpoint,
            deploy=path("deploy"),
            mjcf=path("mjcf"),
            joint_names=tuple(names) if names is not None else None,
            find_deploy=not has_contract,
        )
    except InvalidArgumentError as err:
        fail("mjcf" if "mjcf" in merged else "joint_names", str(err))
