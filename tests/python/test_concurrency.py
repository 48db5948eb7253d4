"""Threads sharing one loaded policy through the bindings: 8 threads x 500 calls on 1 and 4
runners, each thread with its own batch sizes, mixing the keyed (mapping and TensorDict) and
positional paths with calls that must be refused. Every result must equal the single-thread
reference computed first. The deterministic held-call cases (a second runner serving a call
meanwhile, a session refusing a concurrent step) are in tests/cpp/test_concurrency.cpp, which
can stop a call inside the model."""

from __future__ import annotations

import threading

import pytest
import torch
from tensordict import TensorDict

import tdaot

THREADS = 8
CALLS = 500


def _inputs(batch: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "agents.observation": torch.randn(batch, 2, 5, generator=generator),
        "robot.joints": torch.randn(batch, 7, generator=generator),
    }


def _bad_calls(native, good: dict[str, torch.Tensor]):
    """(call, error type, key) triples that must be refused, on both paths."""
    obs, joints = good["agents.observation"], good["robot.joints"]
    batch = obs.shape[0]
    return [
        (lambda: native.run_positional(obs, joints.double()), tdaot.DtypeError, "robot.joints"),
        (lambda: native.run_positional(obs[:0], joints), tdaot.BatchSizeError, "agents.observation"),
        (
            lambda: native.run_positional(torch.randn(batch, 5, 2).transpose(1, 2), joints),
            tdaot.LayoutError,
            "agents.observation",
        ),
        (lambda: native({"agents.observation": obs}), tdaot.MissingKeyError, "robot.joints"),
        (lambda: native({**good, "robot.velocity": joints}), tdaot.UnknownKeyError, "robot.velocity"),
        (
            lambda: native({**good, "robot.joints": torch.empty(batch, 7, device="meta")}),
            tdaot.DeviceError,
            "robot.joints",
        ),
        (lambda: native({**good, "agents.observation": obs[:, :1]}), tdaot.ShapeError, "agents.observation"),
    ]


@pytest.mark.parametrize("runners", [1, 4])
def test_eight_threads_mixing_good_and_bad_calls_match_the_reference(nested, runners):
    native = tdaot.load(nested[2].path, num_runners=runners)
    work = []
    for t in range(THREADS):
        variants = [_inputs(batch, seed=10 * t + i) for i, batch in enumerate((1 + t, 9 + 2 * t, 64 - t))]
        references = [native.run_positional(*v.values()) for v in variants]
        work.append((variants, references, _bad_calls(native, variants[0])))
    failures: list[str] = []
    counts = [[0, 0] for _ in range(THREADS)]  # good calls, refused calls

    def worker(t: int) -> None:
        variants, references, bad = work[t]
        for i in range(CALLS):
            variant, reference = variants[i % 3], references[i % 3]
            try:
                if i % 6 in (2, 5):
                    call, error, key = bad[(i // 3) % len(bad)]
                    try:
                        call()
                        failures.append(f"thread {t} call {i}: a bad call was accepted")
                    except tdaot.InputError as err:
                        if type(err) is not error or err.key != key or f"'{key}'" not in str(err):
                            failures.append(f"thread {t} call {i}: {type(err).__name__}: {err}")
                        counts[t][1] += 1
                    continue
                if i % 6 in (0, 3):
                    got = native.run_positional(*variant.values())
                elif i % 6 == 1:
                    out = native(variant)
                    got = [out["agents", "action"], out["robot", "command"]]
                else:
                    td = TensorDict(
                        {
                            "agents": {"observation": variant["agents.observation"]},
                            "robot": {"joints": variant["robot.joints"]},
                        },
                        batch_size=variant["robot.joints"].shape[:1],
                    )
                    out = native(td)
                    got = [out["agents", "action"], out["robot", "command"]]
                if not all(torch.equal(g, r) for g, r in zip(got, reference)):
                    failures.append(f"thread {t} call {i}: result differs from the reference")
                counts[t][0] += 1
            except Exception as err:  # noqa: BLE001 - every surprise is a failure to report
                failures.append(f"thread {t} call {i}: {type(err).__name__}: {err}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for good, refused in counts:
        assert good + refused == CALLS
        assert refused > CALLS // 4
    # Still right afterwards, on the same policy.
    variants, references, _ = work[0]
    assert all(torch.equal(g, r) for g, r in zip(native.run_positional(*variants[1].values()), references[1]))
