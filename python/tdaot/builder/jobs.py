"""`tdaot build --config`: build many artifacts, each for its CPU targets, in parallel
processes, from the cache where possible, with a parity gate and a report per artifact."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict

from tdaot.builder.cache import ArtifactCache
from tdaot.builder.config import BuildSpec
from tdaot.builder.cross import host_architecture
from tdaot.builder.pipeline import build
from tdaot.builder.progress import Progress
from tdaot.builder.report import BuildResult
from tdaot.errors import ConfigError

Notify = Callable[[str, str, str], None]  # (artifact id, status, detail)


def select_shard(specs: list[BuildSpec], shard: str | None) -> list[BuildSpec]:
    """Shard "I/N" (1-based): every N-th artifact of the list sorted by id, so N CI
    machines given 1/N .. N/N cover the list exactly once, whatever order it is in."""
    if shard is None:
        return specs
    index, sep, count = shard.partition("/")
    if not (sep and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ConfigError(f"shard {shard!r} must be I/N with 1 <= I <= N, e.g. 2/4")
    ordered = sorted(specs, key=lambda spec: spec.id)
    return ordered[int(index) - 1 :: int(count)]


def build_one(
    spec: BuildSpec,
    notify: Notify,
    *,
    cache_dir: str | None = None,
    use_cache: bool = True,
    check_reproducible: bool = False,
) -> BuildResult:
    """Builds one artifact and never raises: every failure becomes a failed result."""
    started = time.perf_counter()
    result = BuildResult(
        id=spec.id, name=spec.name, cpu_target=spec.cpu_target, output=spec.output, status="failed"
    )
    try:
        module, example, options = spec.load()
        spec = dataclasses.replace(spec, options=options)  # with the run's contract, for the rebuilds
        artifact = build(
            module,
            example,
            spec.output,
            spec.options,
            factory=spec.factory,
            cache=ArtifactCache(cache_dir) if use_cache else False,
            on_status=lambda status: notify(spec.id, status, ""),
        )
        result.export_seconds = round(artifact.export_seconds, 3)
        result.compile_seconds = round(artifact.compile_seconds, 3)
        result.cache_hit = artifact.cache_hit
        result.sha256 = artifact.sha256
        result.size_bytes = artifact.size_bytes
        result.signed_by = artifact.signed_by
        if spec.parity and artifact.manifest.interaction_type != "random":
            from tdaot.testing import assert_parity  # the parity gate loads the runtime

            notify(spec.id, "checking parity", "")
            # A package for another architecture runs in its lite runtime under qemu-user.
            foreign = artifact.manifest.architecture not in ("", host_architecture())
            report = assert_parity(module, artifact, example, runtime="lite" if foreign else "torch")
            result.parity = [
                {k: v for k, v in asdict(row).items() if k in ("key", "batch", "max_abs", "max_rel")}
                for row in report.rows
            ]
        if check_reproducible:
            notify(spec.id, "checking reproducibility", "")
            result.differing_entries = _rebuild_differences(module, example, spec)
            result.reproducible = not result.differing_entries
        result.status = "cached" if artifact.cache_hit else "built"
    except Exception as err:  # noqa: BLE001 - one artifact's failure must not stop the others
        result.error = f"{type(err).__name__}: {err}"
    result.seconds = round(time.perf_counter() - started, 3)
    final = {"built": "done"}.get(result.status, result.status)
    notify(spec.id, final, (result.error or "").splitlines()[0] if result.failed else "")
    return result


def build_all(
    specs: list[BuildSpec],
    progress: Progress,
    *,
    jobs: int = 1,
    **options,
) -> list[BuildResult]:
    """Builds every spec (in ``jobs`` processes when > 1); results in spec order."""
    if jobs <= 1 or len(specs) <= 1:
        return [build_one(spec, progress.update, **options) for spec in specs]
    # spawn: a forked child would inherit torch's threads and locks in whatever state.
    context = multiprocessing.get_context("spawn")
    results: dict[str, BuildResult] = {}
    with context.Manager() as manager, ProcessPoolExecutor(jobs, mp_context=context) as pool:
        queue = manager.Queue()
        futures = {pool.submit(_build_in_worker, spec, queue, options): spec for spec in specs}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(queue, progress)
            for future in done:
                spec = futures[future]
                try:
                    results[spec.id] = future.result()
                except Exception as err:  # noqa: BLE001 - e.g. the worker process died
                    results[spec.id] = BuildResult(
                        id=spec.id, name=spec.name, cpu_target=spec.cpu_target, output=spec.output,
                        status="failed", error=f"{type(err).__name__}: {err}",
                    )  # fmt: skip
                    progress.update(spec.id, "failed", results[spec.id].error)
            progress.refresh()
        _drain(queue, progress)
    return [results[spec.id] for spec in specs]


def _build_in_worker(spec: BuildSpec, queue, options: dict) -> BuildResult:
    return build_one(spec, lambda *event: queue.put(event), **options)


def _drain(queue, progress: Progress) -> None:
    while not queue.empty():
        progress.update(*queue.get())


def _rebuild_differences(module, example, spec: BuildSpec) -> list[str]:
    """Builds twice more, without the artifact cache and each under another
    ``TORCHINDUCTOR_CACHE_DIR`` (which a build must not depend on: tdaot.builder.inductor_dir);
    the package entries that differ."""
    with tempfile.TemporaryDirectory(prefix="tdaot-repro-") as scratch:
        packages = []
        for attempt in range(2):
            with _environment("TORCHINDUCTOR_CACHE_DIR", os.path.join(scratch, f"inductor-{attempt}")):
                path = os.path.join(scratch, f"{attempt}.pt2")
                artifact = build(module, example, path, spec.options, factory=spec.factory, cache=False)
                packages.append(artifact.path)
        return _differing_entries(*packages)


def _differing_entries(first: str, second: str) -> list[str]:
    with zipfile.ZipFile(first) as a, zipfile.ZipFile(second) as b:
        in_a, in_b = set(a.namelist()), set(b.namelist())
        return [
            name
            for name in sorted(in_a | in_b)
            if name not in in_a or name not in in_b or a.read(name) != b.read(name)
        ]


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
