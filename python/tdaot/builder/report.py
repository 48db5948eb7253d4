"""Build reports a CI system can read: JSON, and JUnit XML with one test case per artifact."""

from __future__ import annotations

import json
import os
import platform
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from tdaot._version import __version__
from tdaot.errors import BuildError

REPORT_FORMAT = 1


@dataclass
class BuildResult:
    """What happened to one artifact (one policy for one CPU target)."""

    id: str
    name: str
    cpu_target: str
    output: str
    status: str  # "built", "cached" or "failed"
    seconds: float = 0.0
    export_seconds: float | None = None
    compile_seconds: float | None = None
    cache_hit: bool = False
    sha256: str | None = None
    size_bytes: int | None = None
    signed_by: str | None = None  # the id of the key that signed the package (sign_key)
    parity: list[dict[str, Any]] | None = None  # per key and batch: max abs / rel error
    reproducible: bool | None = None  # None: not checked
    differing_entries: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def report_dict(results: list[BuildResult], shard: str | None = None) -> dict[str, Any]:
    return {
        "format": REPORT_FORMAT,
        "tdaot_version": __version__,
        "torch_version": torch.__version__,
        "host": platform.node(),
        "shard": shard,
        "summary": summary(results),
        "results": [asdict(r) for r in results],
    }


def summary(results: list[BuildResult]) -> dict[str, int]:
    counts = {"built": 0, "cached": 0, "failed": 0}
    for result in results:
        counts[result.status] += 1
    return {"total": len(results), **counts}


def write_json(path: str, results: list[BuildResult], shard: str | None = None) -> None:
    _write(path, json.dumps(report_dict(results, shard), indent=2) + "\n")


def write_junit(path: str, results: list[BuildResult]) -> None:
    suite = ET.Element(
        "testsuite",
        name="tdaot build",
        tests=str(len(results)),
        failures=str(sum(r.failed for r in results)),
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for result in results:
        case = ET.SubElement(
            suite, "testcase", classname="tdaot.build", name=result.id, time=f"{result.seconds:.3f}"
        )
        if result.failed:
            failure = ET.SubElement(case, "failure", message=(result.error or "failed").splitlines()[0])
            failure.text = result.error
        out = ET.SubElement(case, "system-out")
        out.text = "\n".join(
            f"{k}: {v}"
            for k, v in asdict(result).items()
            if k not in ("id", "error", "parity") and v not in (None, [])
        )
    ET.indent(suite)
    _write(path, ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n")


def load_results(path: str) -> list[BuildResult]:
    try:
        with open(path) as file:
            data = json.load(file)
    except (OSError, json.JSONDecodeError) as err:
        raise BuildError(f"cannot read report {path!r}: {err}") from None
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
        raise BuildError(f"{path!r} is not a tdaot build report (format {REPORT_FORMAT})")
    return [BuildResult(**entry) for entry in data["results"]]


def merge(paths: list[str]) -> list[BuildResult]:
    """Joins shard reports; an artifact reported by two shards is an error (the shards overlap)."""
    merged: dict[str, tuple[str, BuildResult]] = {}
    for path in paths:
        for result in load_results(path):
            if result.id in merged:
                raise BuildError(
                    f"{result.id} is in both {merged[result.id][0]!r} and {path!r}: shards overlap"
                )
            merged[result.id] = (path, result)
    return [result for _, result in merged.values()]


def _write(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w") as file:
        file.write(text)
