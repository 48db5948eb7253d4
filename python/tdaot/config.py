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

Every mistake is a ConfigError naming the artifact and the field.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tdaot.build import DEVICES
from tdaot.errors import BuildError
from tdaot.export import INTERACTION_TYPES, BatchSpec
from tdaot.targets import CPU_TARGETS
from tdaot.tuning import DEFAULT_TUNING, TUNINGS

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_FIELDS = {
    "name", "factory", "out_keys", "batch", "interaction_type", "device",
    "cpu_targets", "output", "output_dir", "parity", "kernel_threads", "tuning",
}  # fmt: skip
_DEFAULTS = {
    "batch": "dynamic",
    "interaction_type": "deterministic",
    "device": "cpu",
    "cpu_targets": ["native"],
    "output_dir": "dist",
    "parity": True,
    "kernel_threads": 1,
    "tuning": DEFAULT_TUNING,
}


class ConfigError(BuildError):
    """A build configuration file is unreadable or has a bad entry."""


@dataclass(frozen=True)
class BuildSpec:
    """One artifact for one CPU target, as a build job."""

    name: str
    factory: str
    output: str
    cpu_target: str
    out_keys: tuple[tuple[str, ...], ...] | None
    batch: BatchSpec
    interaction_type: str
    device: str
    parity: bool
    kernel_threads: int = 1
    tuning: str = DEFAULT_TUNING

    @property
    def id(self) -> str:
        return f"{self.name}@{self.cpu_target}"


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
        specs.extend(_parse_entry({**_DEFAULTS, **defaults, **entry}, entry, base_dir, where))
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

    for required in ("name", "factory"):
        if required not in entry:
            fail(required, "missing")
    name, factory = merged["name"], merged["factory"]
    if not isinstance(name, str) or not _NAME.match(name):
        fail("name", f"{name!r} must be letters, digits, '_', '.' or '-'")
    if not isinstance(factory, str) or ":" not in factory:
        fail("factory", f"{factory!r} must look like FILE.py:FUNCTION or MODULE:FUNCTION")
    source, _, function = factory.rpartition(":")
    if source.endswith(".py") and not os.path.isabs(source):
        factory = f"{base_dir / source}:{function}"

    out_keys = merged.get("out_keys")
    if out_keys is not None:
        if not isinstance(out_keys, list) or not all(isinstance(k, str) and k for k in out_keys):
            fail("out_keys", f"expected a list of keys like 'a.b', got {out_keys!r}")
        out_keys = tuple(tuple(k.split(".")) for k in out_keys)
    batch = merged["batch"]
    if isinstance(batch, list):
        if len(batch) != 2 or not all(isinstance(b, int) for b in batch):
            fail("batch", f"expected [min, max], got {batch!r}")
        batch = tuple(batch)
    elif batch not in ("dynamic", "static") and not (isinstance(batch, int) and not isinstance(batch, bool)):
        fail("batch", f"expected 'dynamic', 'static', a size or [min, max], got {batch!r}")
    if merged["interaction_type"] not in INTERACTION_TYPES:
        fail(
            "interaction_type", f"{merged['interaction_type']!r} is not one of {', '.join(INTERACTION_TYPES)}"
        )
    if merged["device"] not in DEVICES:
        fail("device", f"{merged['device']!r} is not one of {', '.join(DEVICES)}")
    if not isinstance(merged["parity"], bool):
        fail("parity", f"expected true or false, got {merged['parity']!r}")
    threads = merged["kernel_threads"]
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        fail("kernel_threads", f"expected 0 (decided at run time) or a count >= 1, got {threads!r}")
    if merged["tuning"] not in TUNINGS:
        fail("tuning", f"{merged['tuning']!r} is not one of {', '.join(TUNINGS)}")
    if merged["tuning"] != DEFAULT_TUNING and merged["device"] != "cpu":
        fail("tuning", f"{merged['tuning']!r} is for CPU packages (device is {merged['device']!r})")
    targets = merged["cpu_targets"]
    if not isinstance(targets, list) or not targets:
        fail("cpu_targets", f"expected a non-empty list, got {targets!r}")
    for target in targets:
        if target not in CPU_TARGETS:
            fail("cpu_targets", f"{target!r} is not one of {', '.join(CPU_TARGETS)}")
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
            output=str(output_dir / template.format(name=name, target=target)),
            cpu_target=target,
            out_keys=out_keys,
            batch=batch,
            interaction_type=merged["interaction_type"],
            device=merged["device"],
            parity=merged["parity"],
            kernel_threads=threads,
            tuning=merged["tuning"],
        )
        for target in targets
    ]
