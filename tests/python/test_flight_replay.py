"""Replaying flight logs (tdaot.testing.replay, `tdaot replay`): a log of a real binding replays
bit for bit through its package, and the eager policy agrees; a changed byte is reported at its
step and key; a recurrent package's state is carried and its resets honoured; the envelope and
a supervisor replayed as recorded, or left out where their state cannot be rebuilt."""

from __future__ import annotations

import copy
import json
import math
import struct
import subprocess

import pytest
import torch
from examples.policies import LEGGED_DEFAULT_POS
from flight_log_writer import record_run
from test_contract_carry import GRAVITY, LAST_ACTION, SIZE, build_carried
from test_rehearse import arm_contract, arm_policy

import tdaot
from tdaot.cli import main as cli
from tdaot.flight_log import read
from tdaot.testing import lite_runner, replay
from tdaot.testing.flight_replay import replay_report

STEPS = 12


def _observations(batch: int, features: int, scale: float = 1.0):
    generator = torch.Generator().manual_seed(7)
    table = torch.randn(STEPS, batch, features, generator=generator) * scale
    return lambda i: {"observation": table[i]}


@pytest.fixture(scope="module")
def tutorial_log(tutorial, tmp_path_factory):
    path = tmp_path_factory.mktemp("logs") / "tutorial.tdlog"
    native = tdaot.load(tutorial[2].path)
    record_run(native, path, batch=3, steps=STEPS, inputs_for=_observations(3, 3))
    return path


def _flip(path, out, seq: int, field: str, byte: int = 0):
    """A copy of the log at ``path`` with one byte of ``field`` of step ``seq`` flipped."""
    data = bytearray(path.read_bytes())
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[16 : 16 + size])
    offset = {f["name"]: f["offset"] for f in header["fields"]}[field]
    for slot in range(header["capacity"]):
        base = header["data_offset"] + slot * header["step_bytes"]
        if struct.unpack_from("<Q", data, base)[0] == seq:
            data[base + offset + byte] ^= 0x01
    out.write_bytes(bytes(data))
    return out


def test_a_log_of_a_real_binding_replays_bit_for_bit_and_the_eager_policy_agrees(tutorial, tutorial_log):
    report = replay(tutorial_log, tutorial[0])
    package, eager = report.checks
    assert package.exact and package.compared == STEPS and package.ok
    assert eager.reference == "recorded outputs" and eager.compared == STEPS and eager.ok
    assert "agree bit for bit over 12 steps" in report.describe()


def test_one_flipped_output_byte_is_reported_at_exactly_its_step_and_key(tutorial_log, tmp_path):
    bad = _flip(tutorial_log, tmp_path / "flipped.tdlog", seq=5, field="outputs/loc", byte=4)
    with pytest.raises(AssertionError, match=r"step 4 \(seq 5\), outputs/loc\[0, 1\]: expected") as raised:
        replay(bad)
    assert "package vs recorded outputs: DIVERGES (bit for bit)" in str(raised.value)
    log = read(bad)
    assert log.steps[4].outputs["loc"][0, 1] != read(tutorial_log).steps[4].outputs["loc"][0, 1]


def test_tdaot_replay_exits_non_zero_on_divergence_and_zero_on_agreement(tutorial_log, tmp_path, capsys):
    assert cli(["replay", str(tutorial_log), "--policy", "examples/policies.py:tutorial_policy"]) == 0
    out = capsys.readouterr().out
    assert "package vs recorded outputs: agree bit for bit over 12 steps" in out
    assert "eager policy vs recorded outputs: agree within each dtype's parity tolerance over 12 steps" in out
    bad = _flip(tutorial_log, tmp_path / "flipped.tdlog", seq=9, field="outputs/sample", byte=0)
    assert cli(["replay", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "DIVERGES (bit for bit) at step 8 (seq 9), outputs/sample[0, 0]" in out
    assert out.endswith("DIVERGE\n")
    # The flipped bit is the lowest of the mantissa: within an absolute tolerance.
    assert cli(["replay", str(bad), "--atol", "1e-4"]) == 0
    assert "agree within rtol 0, atol 0.0001 over 12 steps" in capsys.readouterr().out


def test_an_eager_policy_that_differs_is_reported_at_its_first_step(tutorial, tutorial_log):
    changed = copy.deepcopy(tutorial[0])
    with torch.no_grad():
        next(iter(changed.parameters())).add_(0.01)
    with pytest.raises(AssertionError) as raised:
        replay(tutorial_log, changed)
    text = str(raised.value)
    assert "package vs recorded outputs: agree bit for bit over 12 steps" in text
    diverges = "eager policy vs recorded outputs: DIVERGES (within each dtype's parity tolerance)"
    assert f"{diverges} at step 0 (seq 1), outputs/" in text


def test_without_the_package_at_hand_the_eager_policy_alone_is_replayed(tutorial, tutorial_log):
    data = bytearray(tutorial_log.read_bytes())
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[16 : 16 + size])
    recorded = header["package"]["path"]
    header["package"]["path"] = "absent/moved.pt2"  # shorter: the header keeps its size
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= size
    moved = bytes(data[:16]) + text + b" " * (size - len(text)) + bytes(data[16 + size :])
    report = replay(moved, tutorial[0])
    assert [check.name for check in report.checks] == ["eager policy"] and report.ok
    assert "moved.pt2' is not here: the eager policy alone was replayed" in report.describe()
    with pytest.raises(tdaot.FlightLogError, match=r"recorded with package '.*moved.pt2', which is not here"):
        replay(moved)
    assert replay(moved, package=recorded).ok  # --package


def test_another_package_is_refused_naming_both_digests(tutorial_log, legged):
    with pytest.raises(tdaot.IntegrityError) as raised:
        replay(tutorial_log, package=legged[2].path)
    message = str(raised.value)
    assert read(tutorial_log).package_sha256 in message and tdaot.load(legged[2].path).sha256 in message


def test_a_recurrent_package_carries_its_state_and_honours_the_recorded_resets(recurrent, tmp_path):
    native = tdaot.load(recurrent[2].path)
    path = tmp_path / "recurrent.tdlog"
    resets = {4: torch.tensor([True, False]), 8: torch.tensor([False, True])}
    record_run(native, path, batch=2, steps=STEPS, inputs_for=_observations(2, 3), resets=resets)
    log = read(path)
    assert log.steps[4].reset.tolist() == [True, False] and log.steps[4].inputs["is_init"][:, 0].tolist() == [
        True,
        False,
    ]
    report = replay(log, recurrent[0])
    assert [check.compared for check in report.checks] == [STEPS, STEPS] and report.ok
    # The eager policy without the recorded resets would carry row 0's state through step 4.
    without = tmp_path / "no-resets.tdlog"
    record_run(native, without, batch=2, steps=STEPS, inputs_for=_observations(2, 3), resets=resets)
    data = bytearray(without.read_bytes())
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[16 : 16 + size])
    reset = {f["name"]: f["offset"] for f in header["fields"]}["reset"]
    for slot in range(header["capacity"]):
        data[header["data_offset"] + slot * header["step_bytes"] + reset] = 0
    with pytest.raises(
        AssertionError, match=r"package vs recorded outputs: DIVERGES .* step 4 \(seq 5\), inputs/"
    ):
        replay(bytes(data))


def test_a_changed_recorded_state_is_reported_as_the_carried_input(recurrent, tmp_path):
    native = tdaot.load(recurrent[2].path)
    path = tmp_path / "state.tdlog"
    record_run(native, path, batch=1, steps=STEPS, inputs_for=_observations(1, 3))
    bad = _flip(path, tmp_path / "state-flipped.tdlog", seq=6, field="inputs/hidden", byte=2)
    with pytest.raises(AssertionError, match=r"step 5 \(seq 6\), inputs/hidden\[0, 0\]"):
        replay(bad)


def test_the_envelope_replays_as_recorded_from_the_first_step(legged, tmp_path):
    native = tdaot.load(legged[2].path)
    path = tmp_path / "envelope.tdlog"
    # Large observations: the actions jump, and the envelope's max_delta holds them.
    record_run(native, path, batch=1, steps=STEPS, inputs_for=_observations(1, 48, 30.0), envelope=True)
    log = read(path)
    assert log.envelope and log.steps[-1].interventions["rate_limited"] > 0
    report = replay(log, legged[0])
    package, eager = report.checks
    assert package.compared == STEPS and "bound as recorded, with the envelope" in package.describe()
    assert eager.reference == "the package bound without the envelope and the supervisor" and eager.ok


def test_a_wrapped_ring_with_a_supervisor_is_compared_where_neither_acted(legged, tmp_path):
    native = tdaot.load(legged[2].path)
    path = tmp_path / "wrapped.tdlog"
    # Limits 0.6 rad around the default pose: the small observations' targets stay inside, every
    # third step's large ones are clipped.
    default = torch.tensor(LEGGED_DEFAULT_POS)
    limits = tdaot.Supervisor(low=(default - 0.6).tolist(), high=(default + 0.6).tolist())
    small = _observations(1, 48, 0.05)
    record_run(
        native,
        path,
        batch=1,
        steps=STEPS,
        inputs_for=lambda i: {"observation": small(i)["observation"] * (1000.0 if i % 3 == 0 else 1.0)},
        supervisor=limits,
        capacity=8,
    )
    log = read(path)
    assert log.supervised and log.steps[0].seq == STEPS - 8 + 1
    report = replay(log, legged[0])
    package, eager = report.checks
    assert report.ok, report.describe()
    assert "cannot be rebuilt: bound without them" in package.describe()
    skipped = package.skipped["altered by the envelope or supervisor"]
    # The first step is not known (its counts have no previous); the limits clip some others.
    assert package.compared + skipped == 8 and package.compared >= 1 and skipped >= 1
    assert eager.compared == 8, report.describe()
    print(report.describe())


def test_a_log_the_lite_runtime_wrote_replays_bit_for_bit_on_the_full_runtime(tutorial, tmp_path):
    """tdaot-lite bench --record: the timed runs, the warm-up's overwritten (seq 4..23); the
    full runtime runs the same model library on the recorded inputs."""
    path = tmp_path / "bench.tdlog"
    command = [lite_runner.find_tool(), "bench", tutorial[2].path, "--batch", "1", "--iters", "20"]
    command += ["--warmup", "3", "--record", "20", "--record-out", str(path)]
    subprocess.run(command, capture_output=True, text=True, check=True)
    log = read(path)
    assert (log.runtime, log.model) == ("lite", "b1") and [s.seq for s in log.steps] == list(range(4, 24))
    report = replay(log, tutorial[0])
    assert [check.compared for check in report.checks] == [20, 20]
    assert "recorded on the lite runtime, replayed on the full runtime" in report.describe()


def test_a_snapshot_taken_while_bound_reads_and_replays_like_a_dump(tutorial):
    native = tdaot.load(tutorial[2].path)
    binding = native.bind(2, record=4)
    observations = _observations(2, 3)
    for i in range(6):
        binding.inputs["observation"].copy_(observations(i)["observation"])
        binding.run()
    log = read(binding.snapshot())
    assert log.path == "<flight log bytes>" and [s.seq for s in log.steps] == [3, 4, 5, 6]
    assert torch.equal(log.steps[-1].outputs["loc"], binding.outputs["loc"])
    assert replay(log, tutorial[0]).ok


@pytest.fixture(scope="module")
def arm(build_package):
    """test_rehearse's arm package: a contract of observation terms with a supervisor (limits,
    max_velocity 50 rad/s, the damp fallback); one build per session, shared by name."""
    return build_package("rehearse-arm", arm_policy, {"batch": 1, "contract": arm_contract()})


def test_the_contracts_supervisor_replays_as_recorded_through_its_fallback(arm, tmp_path):
    """A joint velocity over the cap at step 4 damps the row until the reset before step 8: the
    package bound as recorded (envelope and the contract's supervisor) reproduces every step bit
    for bit, fallback included (its last_action term carried by the runner, whose slot the eager
    replay rebuilds); the MCAP export groups the observation by term."""
    native = tdaot.load(arm[2].path)
    path = tmp_path / "arm.tdlog"

    def observation(i):
        obs = torch.zeros(1, 14)
        obs[0, 2] = -1.0  # upright
        obs[0, 6:8] = torch.tensor([0.1 * math.sin(i), -0.05 * i])  # joint_pos_rel
        obs[0, 8:10] = torch.tensor([100.0 if i == 4 else 0.5, 0.0])  # joint_vel_rel
        return {"observation": obs}

    record_run(
        native,
        path,
        batch=1,
        steps=STEPS,
        inputs_for=observation,
        resets={8: torch.tensor([True])},
        envelope=True,
        supervisor=True,
    )
    log = read(path)
    modes = [step.supervisor[0].mode for step in log.steps]
    assert (
        modes[4:8] == ["damped"] * 4 and modes[8] != "damped" and log.steps[4].interventions["fallback"] > 0
    )
    report = replay(log)
    (package,) = report.checks
    assert package.compared == STEPS and package.exact and report.ok, report.describe()
    assert "bound as recorded, with the envelope and supervisor" in package.describe()
    # The package carries the last_action term itself (tdaot.* state): the eager replay rebuilds
    # its slot, compared with the package bound without the envelope and the supervisor.
    eager = replay(log, arm[0]).checks[1]
    assert eager.reference == "the package bound without the envelope and the supervisor"
    assert eager.compared == STEPS and eager.ok

    from tdaot.flight_log.mcap_export import export_mcap, key_schema

    rows = key_schema(log, "observation", "input")["properties"]["rows"]["items"]["properties"]
    assert list(rows) == [
        "projected_gravity",
        "velocity_commands",
        "joint_pos_rel",
        "joint_vel_rel",
        "last_action",
        "gait_phase",
    ]
    assert list(rows["joint_vel_rel"]["properties"]) == ["shoulder", "elbow"]
    assert list(rows["gait_phase"]["properties"]) == ["sin", "cos"]
    counts = export_mcap(log, tmp_path / "arm.mcap")
    # One channel per recorded key, the runner-carried state's included.
    carried = "tdaot.last_action.observation.last_action"
    topics = [
        "/inputs/observation",
        f"/inputs/{carried}",
        "/outputs/action",
        f"/outputs/next.{carried}",
        "/step",
    ]
    assert counts == dict.fromkeys(topics, STEPS)


@pytest.fixture(scope="module")
def carry_log(build_package, tmp_path_factory):
    """test_contract_carry's package (a projected_gravity term over 3 steps and a last_action
    term, carried by the runner; a clipped action) recorded over 12 steps at batch 2, row 1 reset
    before step 5. The caller writes garbage where the runner writes: the slots must be rebuilt."""
    policy, _contract, path = build_carried(build_package)
    log = tmp_path_factory.mktemp("logs") / "carry.tdlog"
    record_run(
        tdaot.load(path),
        log,
        batch=2,
        steps=STEPS,
        inputs_for=_observations(2, SIZE, 2.0),
        resets={5: torch.tensor([False, True])},
    )
    return policy, log


def test_the_eager_replay_rebuilds_the_carried_last_action_and_history_slots(carry_log):
    policy, path = carry_log
    log = read(path)
    carried = {pair.input for pair in log.manifest.recurrent.state}
    assert carried == {
        "tdaot.last_action.observation.last_action",
        "tdaot.history.observation.projected_gravity",
    }
    assert log.steps[5].reset.tolist() == [False, True]
    assert log.steps[5].inputs["is_init"][:, 0].tolist() == [False, True]
    report = replay(log, policy)
    package, eager = report.checks
    assert package.ok and package.compared == STEPS
    assert eager.reference == "recorded outputs" and eager.compared == STEPS and eager.ok, report.describe()


def _perturbed(policy, columns: list[tuple[slice, float]]):
    changed = copy.deepcopy(policy)
    with torch.no_grad():
        for columns_of, delta in columns:
            changed.module[0].weight[:, columns_of] += delta
    return changed


@pytest.mark.parametrize(
    "term, columns",
    [
        # Zero at step 0 (no previous action): the first difference is at step 1.
        ("last_action", [(LAST_ACTION, 0.5)]),
        # The oldest step up and the newest down by as much: equal at step 0, whose window is
        # the newest step repeated; different once the window holds older steps.
        (
            "projected_gravity",
            [(slice(GRAVITY.start, GRAVITY.start + 3), 0.5), (slice(GRAVITY.stop - 3, GRAVITY.stop), -0.5)],
        ),
    ],
)
def test_an_eager_policy_that_reads_a_carried_slot_otherwise_diverges_at_step_1(carry_log, term, columns):
    policy, path = carry_log
    report = replay_report(path, _perturbed(policy, columns))
    package, eager = report.checks
    assert package.ok and eager.divergence is not None, report.describe()
    assert (eager.divergence.step, eager.divergence.key) == (1, "outputs/action"), report.describe()


def test_the_eager_replay_resets_the_carried_state_where_the_log_says(carry_log, tmp_path):
    """Without the recorded reset (its byte zeroed) the eager policy keeps row 1's previous
    action and window through step 5, and diverges there."""
    policy, path = carry_log
    data = bytearray(path.read_bytes())
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[16 : 16 + size])
    reset = {f["name"]: f["offset"] for f in header["fields"]}["reset"]
    for slot in range(header["capacity"]):
        data[header["data_offset"] + slot * header["step_bytes"] + reset + 1] = 0
    report = replay_report(bytes(data), policy)
    eager = report.checks[1]
    assert eager.divergence is not None and eager.divergence.step == 5, report.describe()
    assert eager.divergence.index[0] == 1, report.describe()


def test_an_eager_policy_without_an_out_key_is_reported_not_raised(carry_log):
    from tensordict.nn import TensorDictModule

    policy, path = carry_log
    other = TensorDictModule(policy.module, in_keys=["observation"], out_keys=["other"])
    eager = replay_report(path, other).checks[1]
    assert (eager.divergence.step, eager.divergence.key) == (0, "outputs/action")
    assert eager.divergence.problem == "the eager policy does not write it"
