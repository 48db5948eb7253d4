"""What a flight log says about its binding beyond the buffers: the supervisor it ran (the
contract's or one given at bind), rebuilt by the replay, and the weights it ran (those live at
bind, the generation of each step), so a replay swaps in the right weight file and runs, but
does not compare, the steps that ran weights swapped in later."""

from __future__ import annotations

import copy
import json
import struct

import pytest
import torch
from flight_log_writer import record_run
from test_rehearse import arm_contract, arm_policy

import tdaot
from tdaot.cli import main as cli
from tdaot.flight_log import read
from tdaot.flight_log.replay import OTHER_WEIGHTS
from tdaot.flight_log.summary import describe
from tdaot.testing import replay

STEPS = 10


@pytest.fixture(scope="module")
def arm(build_package):
    """test_rehearse's arm package (its contract's supervisor: max_velocity 50 rad/s, the damp
    fallback); one build per session, shared by name."""
    return build_package("rehearse-arm", arm_policy, {"batch": 1, "contract": arm_contract()})


def _retrained_weights(built, path) -> str:
    """A weight file at ``path`` of ``built``'s policy (a build_package triple) with every weight
    changed, as training would."""
    retrained = copy.deepcopy(built[0])
    with torch.no_grad():
        for parameter in retrained.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(5)) * 0.5)
    tdaot.export_weights(retrained, built[2].path, path)
    return str(path)


def _record_with_swap(native, weights: str, swap_at: int, path) -> None:
    """STEPS steps of ``native`` bound at batch 2 and recorded, ``weights`` swapped in before
    step ``swap_at``; the log dumped at ``path``."""
    binding = native.bind(2, record=STEPS)
    for i in range(STEPS):
        if i == swap_at:
            native.swap_weights(weights)
        binding.inputs["observation"].copy_(_observations(i)["observation"])
        binding.run()
    binding.dump(str(path))


@pytest.fixture(scope="module")
def tutorial_weights(tutorial, tmp_path_factory):
    return _retrained_weights(tutorial, tmp_path_factory.mktemp("weights") / "tutorial-v2.tdw")


def _observations(i: int) -> dict[str, torch.Tensor]:
    return {"observation": torch.randn(2, 3, generator=torch.Generator().manual_seed(i))}


def _arm_observation(i: int) -> dict[str, torch.Tensor]:
    obs = torch.zeros(1, 14)
    obs[0, 2] = -1.0  # upright
    obs[0, 6:8] = torch.tensor([0.02 * i, -0.01 * i])  # joint_pos_rel
    obs[0, 8:10] = torch.tensor([5.0, 0.0])  # joint_vel_rel: over 2 rad/s, under 50
    return {"observation": obs}


def test_a_supervisor_given_at_bind_is_in_the_header_and_replays_as_recorded(arm, tmp_path):
    """A velocity cap of 2 rad/s given at bind (the contract's is 50) damps the arm from the
    first step: the log names that supervisor, and the replay binds it, bit for bit."""
    native = tdaot.load(arm[2].path)
    tight = tdaot.Supervisor(low=-3.0, high=3.0, max_velocity=2.0, fallback="damp")
    path = tmp_path / "tight.tdlog"
    record_run(
        native, path, batch=1, steps=STEPS, inputs_for=_arm_observation, envelope=True, supervisor=tight
    )
    log = read(path)
    assert log.supervised and (log.supervisor["max_velocity"], log.supervisor["fallback"]) == (2.0, "damp")
    modes = [step.supervisor[0].mode for step in log.steps]
    assert "damped" in modes, modes
    report = replay(log)
    (package,) = report.checks
    assert package.exact and package.compared == STEPS, report.describe()
    assert "bound as recorded, with the envelope and supervisor" in package.describe()

    # The contract's own supervisor does not reproduce it: the header's is what the replay ran.
    contracts = tmp_path / "contract.tdlog"
    record_run(
        native, contracts, batch=1, steps=STEPS, inputs_for=_arm_observation, envelope=True, supervisor=True
    )
    assert read(contracts).supervisor["max_velocity"] == 50.0
    assert "damped" not in [step.supervisor[0].mode for step in read(contracts).steps]
    assert not torch.equal(read(contracts).series("action"), log.series("action"))


def test_an_unsupervised_log_names_no_supervisor_and_the_weights_it_was_bound_with(tutorial, tmp_path):
    native = tdaot.load(tutorial[2].path)
    path = tmp_path / "plain.tdlog"
    record_run(native, path, batch=2, steps=3, inputs_for=_observations)
    log = read(path)
    assert log.supervisor is None and not log.supervised
    assert (log.weights_sha256, log.weights_generation) == (native.weights_sha256, 0)
    assert [step.weights_generation for step in log.steps] == [0, 0, 0]
    assert not any(log.other_weights(step) for step in log.steps)


def test_steps_after_a_weight_swap_are_run_but_not_compared(tutorial, tutorial_weights, tmp_path):
    path = tmp_path / "swapped.tdlog"
    _record_with_swap(tdaot.load(tutorial[2].path), tutorial_weights, 4, path)
    log = read(path)
    assert [step.weights_generation for step in log.steps] == [0] * 4 + [1] * 6
    assert [log.other_weights(step) for step in log.steps] == [False] * 4 + [True] * 6
    assert "swapped during the log: seq 5 generation 1" in describe(log)

    report = replay(log, tutorial[0])
    package, eager = report.checks
    assert report.ok, report.describe()
    assert package.compared == 4 and package.skipped[OTHER_WEIGHTS] == 6
    assert eager.compared == 4 and eager.skipped[OTHER_WEIGHTS] == 6
    assert f"6 {OTHER_WEIGHTS}" in report.describe()


def test_a_recurrent_packages_state_after_a_swap_is_not_compared_with_the_old_weights_carry(
    recurrent, tmp_path
):
    """The state a step after the swap reads was carried from the new weights' step: the
    replay reseeds it from the log instead of reporting it as a divergence."""
    weights = _retrained_weights(recurrent, tmp_path / "recurrent-v2.tdw")
    path = tmp_path / "recurrent-swapped.tdlog"
    _record_with_swap(tdaot.load(recurrent[2].path), weights, 3, path)
    report = replay(read(path))
    (package,) = report.checks
    assert report.ok, report.describe()
    assert package.compared == 3 and package.skipped[OTHER_WEIGHTS] == STEPS - 3


def test_a_log_bound_after_a_swap_replays_with_the_weight_file_that_was_live(
    tutorial, tutorial_weights, tmp_path, capsys
):
    native = tdaot.load(tutorial[2].path)
    genuine = native.weights_sha256
    native.swap_weights(tutorial_weights)
    path = tmp_path / "bound-after-swap.tdlog"
    record_run(native, path, batch=2, steps=4, inputs_for=_observations)
    log = read(path)
    assert log.weights_sha256 == native.weights_sha256 != genuine and log.weights_generation == 1

    with pytest.raises(tdaot.IntegrityError) as raised:
        replay(log)
    message = str(raised.value)
    assert log.weights_sha256 in message and genuine in message and "--weights FILE" in message
    report = replay(log, weights=tutorial_weights)
    assert report.checks[0].exact and report.checks[0].compared == 4 and report.ok

    assert cli(["replay", str(path), "--weights", tutorial_weights]) == 0
    assert "package vs recorded outputs: agree bit for bit over 4 steps" in capsys.readouterr().out


def _rewritten(path, change) -> bytes:
    """The log at ``path`` with its header JSON changed by ``change`` (kept within its size)."""
    data = path.read_bytes()
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[16 : 16 + size])
    change(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= size
    return data[:16] + text + b" " * (size - len(text)) + data[16 + size :]


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda h: h.update(weights={"sha256": 7, "generation": 0}), "header member 'weights' is"),
        (lambda h: h["weights"].update(generation=-1), "header member 'weights' is"),
        (lambda h: h.update(supervisor={"max_velocity": 1.0}), "header member 'supervisor' is"),
        (lambda h: h.update(supervisor=[1]), "header member 'supervisor' is [1], expected a JSON object"),
    ],
)
def test_a_malformed_weights_or_supervisor_member_is_refused_naming_it(tutorial, tmp_path, change, problem):
    native = tdaot.load(tutorial[2].path)
    path = tmp_path / "plain.tdlog"
    record_run(native, path, batch=2, steps=1, inputs_for=_observations)
    with pytest.raises(tdaot.FlightLogError) as raised:
        read(_rewritten(path, change))
    assert problem in str(raised.value)


def test_a_log_from_before_the_weights_were_recorded_still_reads_and_replays(tutorial, tmp_path):
    native = tdaot.load(tutorial[2].path)
    path = tmp_path / "plain.tdlog"
    record_run(native, path, batch=2, steps=3, inputs_for=_observations)

    def older(header):
        del header["weights"], header["supervisor"]

    log = read(_rewritten(path, older))
    assert (log.weights_sha256, log.weights_generation, log.supervisor) == (None, None, None)
    assert replay(log).ok
