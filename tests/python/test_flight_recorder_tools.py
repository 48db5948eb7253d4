"""The flight recorder's command lines (docs/flight-recorder.md): ``tdaot-lite run/bench --record N
--record-out PATH`` and robot_service's (at exit, and on SIGUSR1 while the loop runs, through the
async-signal-safe ``Binding::dump_fd``) write flight logs that carry the package's sha256, parsed
here with struct and json as test_flight_recorder.py does."""

from __future__ import annotations

import hashlib
import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest
from test_flight_recorder import parse
from test_rehearse import _cli, _mjcf, _tool, arm_contract, arm_policy

from tdaot.testing import lite_runner

ROOT = Path(__file__).resolve().parents[2]


def _sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _seqs(data: bytes, slots: list[int]) -> list[int]:
    return [struct.unpack_from("<Q", data, at)[0] for at in slots]


def test_tdaot_lite_run_and_bench_write_a_flight_log(tutorial, tmp_path):
    tool = lite_runner.find_tool()
    package = tutorial[2].path
    run_log = tmp_path / "run.tdlog"
    done = subprocess.run(
        [tool, "run", package, "--batch", "1", "--record", "4", "--record-out", run_log],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"flight log written to {run_log} (a ring of 4 steps)" in done.stderr
    data = run_log.read_bytes()
    header, fields, slots = parse(data)
    assert header["package"]["sha256"] == _sha256(package)
    assert (header["runtime"], header["model"], header["capacity"]) == ("lite", "b1", 4)
    assert _seqs(data, slots) == [1]  # one run

    bench_log = tmp_path / "bench.tdlog"
    subprocess.run(
        [
            tool,
            "bench",
            package,
            "--batch",
            "1",
            "--iters",
            "30",
            "--warmup",
            "5",
            "--json",
            "--record",
            "100",
            "--record-out",
            bench_log,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data = bench_log.read_bytes()
    header, _, slots = parse(data)
    assert header["package"]["sha256"] == _sha256(package)
    # The ring is at most --iters: the timed runs only, the warm-up's overwritten.
    assert header["capacity"] == 30 and _seqs(data, slots) == list(range(6, 36))


def _robot_service() -> Path:
    service = Path(os.environ.get("TDAOT_ROBOT_SERVICE") or ROOT / "build/cpp/robot_service/robot_service")
    if not service.is_file():
        pytest.skip(f"{service} is not built (ctest -R robot_service.build)")
    return service


def test_robot_service_dumps_its_flight_log_on_sigusr1(legged, tmp_path):
    """SIGUSR1 while the loop runs: the handler writes the last ticks, whole, and the loop goes on."""
    service = _robot_service()
    log = tmp_path / "service.tdlog"
    process = subprocess.Popen(
        [
            service,
            legged[2].path,
            "--steps",
            "100000",
            "--rate",
            "1000",
            "--record",
            "64",
            "--record-out",
            log,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in process.stdout:  # the handler is installed once this line is printed
            if line.startswith("flight recorder:"):
                break
        else:
            pytest.fail(f"robot_service exited: {process.communicate()}")
        time.sleep(0.5)  # some ticks recorded
        os.kill(process.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                parse(log.read_bytes())  # whole once the handler's writes are done
                break
            except (AssertionError, FileNotFoundError, ValueError, struct.error):
                time.sleep(0.1)
        assert process.poll() is None, "the loop goes on after a dump"
    finally:
        process.terminate()
        process.communicate(timeout=30)
    data = log.read_bytes()
    header, fields, slots = parse(data)
    assert header["package"]["sha256"] == _sha256(legged[2].path)
    assert header["envelope"] is True and header["capacity"] == 64
    seqs = _seqs(data, slots)
    assert seqs and seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # consecutive, at most one left out
    assert len(seqs) >= min(63, seqs[-1] - 1)


@pytest.fixture(scope="module")
def arm(build_package):
    """test_rehearse.py's arm (the same build, so its cache's)."""
    return build_package("rehearse-arm", arm_policy, {"batch": 1, "contract": arm_contract()})


def test_tdaot_rehearse_records_every_control_step_or_the_last_n(arm, tmp_path, capsys, monkeypatch):
    """`tdaot rehearse --record PATH` (the C++ tool's --record): the whole rehearsal's steps by
    default, the last N with --record-steps; the full runtime's log is the same format."""
    monkeypatch.setenv("TDAOT_REHEARSE", _tool())
    mjcf = _mjcf(tmp_path)
    for runtime, extra, capacity in (("lite", (), 50), ("torch", ("--record-steps", "10"), 10)):
        log = tmp_path / f"{runtime}.tdlog"
        code, out, err = _cli(
            capsys,
            arm[2].path,
            "--mjcf",
            mjcf,
            "--seconds",
            "1",
            "--runtime",
            runtime,
            "--record",
            log,
            *extra,
        )
        assert code == 0, err
        assert f"flight log of the last {capacity} control steps written to {log}" in out
        data = log.read_bytes()
        header, _, slots = parse(data)
        assert header["runtime"] == ("lite" if runtime == "lite" else "full")
        assert header["package"]["sha256"] == _sha256(arm[2].path) and header["supervised"] is True
        assert header["capacity"] == capacity and _seqs(data, slots) == list(range(51 - capacity, 51))
