"""Shared, session-scoped artifacts: each AOTInductor compile costs 5-30 s, so the
suite compiles each example policy once and every test reuses the package.

The nested, recurrent, legged and tutorial_b14 packages are the C++ suite's
(tests/cpp/build_test_packages.py), built with its options through a copy of its cache: where
`make test` built them first (TDAOT_TEST_PACKAGES, up to date with their inputs) nothing is
compiled again. At the end the suite prints how many AOTInductor compiles it ran, its
subprocesses' included (TDAOT_COMPILE_LOG), and the tests that compiled most.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for `examples.policies`

from examples.policies import tutorial_policy  # noqa: E402

import tdaot  # noqa: E402
from tdaot.builder import compile_log  # noqa: E402
from tdaot.builder.cache import ArtifactCache  # noqa: E402
from tdaot.builder.factories import load_factory  # noqa: E402


def retrained_copy(policy, seed: int = 7, scale: float = 0.3):
    """A copy of ``policy`` with every weight changed, as training would: each gets ``scale``
    times seeded normal noise."""
    import copy

    import torch

    changed = copy.deepcopy(policy)
    with torch.no_grad():
        for parameter in changed.parameters():
            noise = torch.randn(parameter.shape, generator=torch.Generator().manual_seed(seed))
            parameter.add_(noise * scale)
    return changed


def elu_mlp_policy(inputs: int, hidden: int, outputs: int):
    """A seeded TensorDictModule MLP ``inputs -> hidden -> hidden -> outputs`` (ELU) on
    "observation" -> "action", its network and a 4-row example TensorDict."""
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule

    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(
        nn.Linear(inputs, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU(), nn.Linear(hidden, outputs)
    )
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    return policy, net, TensorDict({"observation": torch.randn(4, inputs)}, batch_size=[4])


def assert_swapped_and_rolled_back_twice(native, policy, package, swap, x, original, **close) -> None:
    """``native`` (package ``package`` of ``policy``, loaded) run on ``x`` with
    ``retrained_copy(policy)``'s weights swapped in (written to ``swap``), then rolled back to
    ``original`` (compared with ``close``'s tolerances), twice: the second swap writes into the
    buffer the load's weights were in, so each buffer gets written while it holds packed
    weights. The retrained outputs within rtol 1e-5, atol 1e-4 (oneDNN sums in another order
    than eager: larger retrained weights, larger sums)."""
    import torch

    retrained = retrained_copy(policy)
    tdaot.export_weights(retrained, package, swap)
    with torch.no_grad():
        want = retrained.module(x)
        for _ in range(2):
            native.swap_weights(swap)
            torch.testing.assert_close(native.run_positional(x)[0], want, rtol=1e-5, atol=1e-4)
            native.rollback_weights()
            torch.testing.assert_close(native.run_positional(x)[0], original, **close)


def _load_fixture_script():
    spec = importlib.util.spec_from_file_location(
        "build_test_packages", ROOT / "tests" / "cpp" / "build_test_packages.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIXTURE_PACKAGES = _load_fixture_script()


# --- AOTInductor compiles counted -----------------------------------------------------------
_compiles: dict[str, int] = {}  # test id -> compiles it (and the fixtures it set up) ran


_LOG = pytest.StashKey[str]()
_LOG_START = pytest.StashKey[int]()
_OWN_LOG = pytest.StashKey[bool]()


_CACHE = pytest.StashKey[str]()


def pytest_configure(config):
    _own_inductor_cache_per_worker()
    # tdaot.build caches every build in its default cache folder: the session's fixtures in an
    # empty one of this process's, never the user's (each test gets its own, below).
    config.stash[_CACHE] = os.environ["TDAOT_CACHE_DIR"] = tempfile.mkdtemp(prefix="tdaot-cache-")
    path = os.environ.get(compile_log.ENV)
    if not path:
        fd, path = tempfile.mkstemp(prefix="tdaot-compiles-", suffix=".log")
        os.close(fd)
        config.stash[_OWN_LOG] = True
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # A log per xdist worker (and its tests' subprocesses), so a test's count holds its own
        # compiles and not the other worker's; the controller adds them up.
        path = f"{path}-{worker}"
        Path(path).write_text("")
    os.environ[compile_log.ENV] = path  # the tests' subprocesses inherit it
    config.stash[_LOG] = path
    config.stash[_LOG_START] = len(compile_log.read(path))


def _suite_compiles(config) -> list:
    """The compiles of this run: the log's since the start, and every xdist worker's."""
    path = config.stash[_LOG]
    workers = sorted(Path(path).parent.glob(Path(path).name + "-gw*"))
    return compile_log.read(path)[config.stash[_LOG_START] :] + [
        c for w in workers for c in compile_log.read(w)
    ]


def pytest_unconfigure(config):
    if _CACHE in config.stash:
        shutil.rmtree(config.stash[_CACHE], ignore_errors=True)
    if config.stash.get(_OWN_LOG, False) and not os.environ.get("PYTEST_XDIST_WORKER"):
        path = Path(config.stash[_LOG])
        for log in [path, *path.parent.glob(path.name + "-gw*")]:
            log.unlink(missing_ok=True)
        os.environ.pop(compile_log.ENV, None)


# --- the longest files first -----------------------------------------------------------------
# `make test` runs two xdist workers, a file at a time each (--dist loadfile): a long file handed
# out last keeps one worker busy while the other idles. So the files run longest first, by the
# seconds each took in the last run that recorded them ($TDAOT_TEST_DURATIONS, a JSON file
# outside the checkout that the Makefile names; files it lacks, new ones, go first). Only the
# order changes; without the file, pytest's own order stays.
_DURATIONS_ENV = "TDAOT_TEST_DURATIONS"


def _recorded_durations() -> dict[str, float]:
    path = os.environ.get(_DURATIONS_ENV)
    try:
        return {str(k): float(v) for k, v in json.loads(Path(path).read_text()).items()} if path else {}
    except (OSError, ValueError, AttributeError):
        return {}  # unreadable or not a JSON object: pytest's own order


def pytest_collection_modifyitems(config, items):
    seconds = _recorded_durations()
    if seconds:
        # sorted() is stable: a file's tests keep their order, and so do files of equal time.
        items[:] = sorted(items, key=lambda item: -seconds.get(item.location[0], float("inf")))


_file_seconds: dict[str, float] = {}  # test file -> seconds its tests took in this run (logreport)


def pytest_sessionfinish(session):
    path = os.environ.get(_DURATIONS_ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER") or not _file_seconds:
        return
    merged = {**_recorded_durations(), **{name: round(t, 1) for name, t in _file_seconds.items()}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    staging = f"{path}.{os.getpid()}"
    Path(staging).write_text(json.dumps(merged, indent=0, sort_keys=True))
    os.replace(staging, path)


def _own_inductor_cache_per_worker():
    """Under pytest-xdist (`make test` runs two workers) each worker compiles into an inductor
    cache of its own: two processes compiling one graph into one cache write the same model
    library, and one read it half-written (seen when the two suites ran side by side)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{base}-{worker}"


_BEFORE = pytest.StashKey[int]()
_COMPILES = "tdaot_compiles"  # a report's user property: the compiles its test ran


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_BEFORE] = len(compile_log.read(item.config.stash[_LOG]))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown":
        ran = len(compile_log.read(item.config.stash[_LOG])) - item.stash[_BEFORE]
        report.user_properties.append((_COMPILES, ran))
    return report


def pytest_runtest_logreport(report):
    # Called in the process that reports: the only one, or xdist's controller for its workers.
    for name, ran in report.user_properties:
        if name == _COMPILES and ran:
            _compiles[report.nodeid] = ran
    _file_seconds[report.location[0]] = _file_seconds.get(report.location[0], 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config):
    compiles = _suite_compiles(config)
    terminalreporter.write_sep("=", f"pytest: {compile_log.summary(compiles)}")
    for nodeid, count in sorted(_compiles.items(), key=lambda item: -item[1])[:15]:
        terminalreporter.write_line(f"{count:4d}  {nodeid}")


@pytest.fixture(autouse=True)
def _artifact_cache_per_test(tmp_path_factory, monkeypatch):
    """Each test's builds in an empty default cache folder of its own (its subprocesses' too), so
    no test finds another's builds."""
    monkeypatch.setenv("TDAOT_CACHE_DIR", str(tmp_path_factory.mktemp("tdaot-cache")))


# --- shared packages ------------------------------------------------------------------------
@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="session")
def shared_cache(artifacts_dir) -> ArtifactCache:
    """A copy of the C++ suite's package cache where it is up to date with its inputs (an
    empty cache otherwise): the fixtures built with its options find their models there."""
    packages = Path(
        os.environ.get("TDAOT_TEST_PACKAGES") or ROOT / "build" / "cpp" / "tests" / "cpp" / "packages"
    )
    directory = artifacts_dir / "cache"
    if FIXTURE_PACKAGES.up_to_date(packages):
        shutil.copytree(packages / FIXTURE_PACKAGES.CACHE, directory)
    return ArtifactCache(directory)


@pytest.fixture(scope="session")
def build_package(artifacts_dir):
    """build_package(name, factory, options, static_batch=None) -> (policy, example, artifact):
    ``factory()``'s policy built with ``options`` as NAME.pt2, once per session (a second call
    with the same name returns the first build; test modules prefix their names). With
    ``static_batch`` None a StaticBatchWarning (the fallback to a static batch) fails the build;
    else it is a regex the warning must match. A SpecialisationWarning (a batch-specialised model
    not built as planned) fails it but for interaction_type "random": a warning every such build
    prints is a bug to fix."""
    built: dict[str, tuple] = {}

    def get(name: str, factory, options: dict, static_batch: str | None = None):
        if name not in built:
            policy, example = factory()
            path = artifacts_dir / f"{name}.pt2"
            with warnings.catch_warnings():
                # Random sampling reaches some operators only through AOTInductor's proxy
                # executor, which the bound run cannot call: its batch-1 model is built without.
                if options.get("interaction_type") != "random":
                    warnings.simplefilter("error", tdaot.SpecialisationWarning)
                if static_batch is None:
                    warnings.simplefilter("error", tdaot.StaticBatchWarning)
                    artifact = tdaot.build(policy, example, path, **options)
                else:
                    with pytest.warns(tdaot.StaticBatchWarning, match=static_batch):
                        artifact = tdaot.build(policy, example, path, **options)
            built[name] = (policy, example, artifact)
        return built[name]

    return get


@pytest.fixture(scope="session")
def tutorial(build_package):
    """The tensordict tutorial policy, dynamic batch."""
    return build_package("tutorial", tutorial_policy, {"factory": "tutorial_policy"})


@pytest.fixture(scope="session")
def shared_package(build_package, shared_cache):
    """shared_package(name) -> (policy, example, artifact): the C++ suite's package NAME
    (tests/cpp/build_test_packages.py), built with its options, from its cache where it can."""

    def get(name: str):
        options = FIXTURE_PACKAGES.build_options(name)
        factory = load_factory(options["factory"])
        return build_package(name, factory, {**options, "cache": shared_cache})

    return get


@pytest.fixture(scope="session")
def tutorial_b14(shared_package, shared_cache):
    """(policy, example, artifact, cache): the tutorial policy, batch 1..64, with latency models
    for batches 1 and 4, built through ``cache`` (test_auto builds from it)."""
    return (*shared_package("tutorial_b14"), shared_cache)


@pytest.fixture(scope="session")
def nested(shared_package):
    """The nested-key policy, batch 1..64."""
    return shared_package("nested")


@pytest.fixture(scope="session")
def recurrent(shared_package):
    """The recurrent example policy, batch 1..64."""
    return shared_package("recurrent")


@pytest.fixture(scope="session")
def legged(shared_package):
    """The 12-joint locomotion policy with its deployment contract, batch 1..64."""
    return shared_package("legged")


@pytest.fixture(scope="session")
def legged_native(legged):
    return tdaot.load(legged[2].path)


@pytest.fixture(scope="session")
def tutorial_native(tutorial):
    return tdaot.load(tutorial[2].path)


@pytest.fixture(scope="session")
def nested_native(nested):
    return tdaot.load(nested[2].path)


@pytest.fixture(scope="session")
def recurrent_native(recurrent):
    return tdaot.load(recurrent[2].path)
