"""`tdaot log show` (steps, interventions, supervisor modes, step-time percentiles, --plots) and
`tdaot log export --mcap` (read back with the mcap library: channels, JSON schemas with the
contract's element names, message counts and values as recorded)."""

from __future__ import annotations

import json

import pytest
import torch
from flight_log_writer import record_run

import tdaot
from tdaot.cli import main as cli
from tdaot.flight_log import read
from tdaot.flight_log.summary import step_times

mcap_reader = pytest.importorskip("mcap.reader")  # the log extra; the Makefile installs it

STEPS = 10


@pytest.fixture(scope="module")
def legged_log(legged, tmp_path_factory):
    """A legged log with the envelope and a limits-only supervisor, batch 2, row 1 reset before
    step 6."""
    native = tdaot.load(legged[2].path)
    path = tmp_path_factory.mktemp("logs") / "legged.tdlog"
    table = torch.randn(STEPS, 2, 48, generator=torch.Generator().manual_seed(3)) * 20
    record_run(
        native,
        path,
        batch=2,
        steps=STEPS,
        inputs_for=lambda i: {"observation": table[i]},
        resets={6: torch.tensor([False, True])},
        envelope=True,
        supervisor=tdaot.Supervisor(low=-3.0, high=3.0),
    )
    return path


def test_log_show_prints_steps_interventions_modes_and_step_times(legged_log, capsys):
    assert cli(["log", "show", str(legged_log)]) == 0
    out = capsys.readouterr().out
    log = read(legged_log)
    times = step_times(log)
    assert times["p50"] <= times["p90"] <= times["p99"] <= times["max"]
    assert f"steps: {STEPS} whole of {STEPS} slots, seq 1..{STEPS}" in out
    assert "gaps: none" in out and "resets: 1: seq 7 rows [1]" in out
    assert "with the envelope and supervisor" in out
    assert "supervisor row 0: running seq 1..10" in out
    assert f"step time: p50 {times['p50']:.1f} us, p90 {times['p90']:.1f} us" in out
    assert "rate_limited" in out and "steps with interventions:" in out
    assert "outputs: action float32[2, 12]" in out


def test_log_show_plots_each_output_and_the_step_times(legged_log, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    plots = tmp_path / "plots"
    assert cli(["log", "show", str(legged_log), "--plots", str(plots)]) == 0
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["outputs_action.png", "step_time.png", "supervisor.png"]
    assert all((plots / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)
    assert f"wrote {plots / 'outputs_action.png'}" in capsys.readouterr().out


def _read_mcap(path):
    with open(path, "rb") as stream:
        reader = mcap_reader.make_reader(stream)
        summary = reader.get_summary()
        messages = [
            (channel.topic, message.log_time, json.loads(message.data))
            for _schema, channel, message in reader.iter_messages(log_time_order=True)
        ]
    return summary, messages


def test_log_export_writes_mcap_with_one_channel_per_key_named_by_the_contract(legged, legged_log, tmp_path):
    out = tmp_path / "legged.mcap"
    assert cli(["log", "export", str(legged_log), "--mcap", str(out)]) == 0
    log = read(legged_log)
    summary, messages = _read_mcap(out)
    topics = {channel.topic: channel for channel in summary.channels.values()}
    assert sorted(topics) == ["/inputs/observation", "/outputs/action", "/step"]
    for channel in topics.values():
        schema = summary.schemas[channel.schema_id]
        assert channel.message_encoding == "json" and schema.encoding == "jsonschema"
        assert summary.statistics.channel_message_counts[channel.id] == STEPS
    action_schema = json.loads(summary.schemas[topics["/outputs/action"].schema_id].data)
    joints = legged[2].manifest.contract.outputs["action"].names
    assert list(action_schema["properties"]["rows"]["items"]["properties"]) == list(joints)
    observation_schema = json.loads(summary.schemas[topics["/inputs/observation"].schema_id].data)
    observation_names = legged[2].manifest.contract.inputs["observation"].names
    assert list(observation_schema["properties"]["rows"]["items"]["properties"]) == list(observation_names)

    by_topic: dict[str, list] = {}
    for topic, log_time, data in messages:
        by_topic.setdefault(topic, []).append((log_time, data))
    for i, step in enumerate(log.steps):
        log_time, action = by_topic["/outputs/action"][i]
        assert log_time == log.bound_at_unix_ns + step.start_ns and action["seq"] == step.seq
        for row in range(2):
            recorded = step.outputs["action"][row].tolist()
            assert [action["rows"][row][name] for name in joints] == recorded
            observed = step.inputs["observation"][row].tolist()
            assert list(by_topic["/inputs/observation"][i][1]["rows"][row].values()) == observed
        meta = by_topic["/step"][i][1]
        assert meta["seq"] == step.seq and meta["duration_ns"] == step.duration_ns
        assert meta["interventions"] == dict(step.interventions)
        assert meta["reset"] == step.reset.tolist()
        assert [s["mode"] for s in meta["supervisor"]] == [s.mode for s in step.supervisor]


def test_observation_terms_are_grouped_by_term_in_the_schema_and_messages(legged, tmp_path):
    """A contract of observation terms: one object per term in the schema and in each message,
    its elements by name (joint terms by joint)."""
    from flight_log_writer import write

    from tdaot.flight_log import mcap_export

    joints = legged[2].manifest.contract.outputs["action"]
    terms = ["base_lin_vel", "base_ang_vel", "projected_gravity", "velocity_commands"]
    terms += ["joint_pos_rel", "joint_vel_rel", "last_action"]
    contract = tdaot.Contract(
        control_dt=0.02,
        inputs={"observation": tdaot.Signal(terms=[tdaot.Term(name) for name in terms])},
        outputs={"action": joints},
    )
    manifest = {**legged[2].manifest.to_dict(), "contract": contract.to_dict()}
    observation = torch.arange(48, dtype=torch.float32).reshape(1, 48)
    step = {"seq": 1, "start_ns": 0, "duration_ns": 1, "inputs": {"observation": observation}}
    step["outputs"] = {"action": torch.zeros(1, 12)}
    path = tmp_path / "terms.tdlog"
    write(
        path,
        manifest=manifest,
        batch=1,
        steps=[step],
        inputs={"observation": ("float32", [1, 48])},
        outputs={"action": ("float32", [1, 12])},
    )
    log = read(path)
    assert log.manifest is not None, log.manifest_problem
    schema = mcap_export.key_schema(log, "observation", "input")
    rows = schema["properties"]["rows"]["items"]["properties"]
    assert list(rows) == terms
    assert list(rows["base_ang_vel"]["properties"]) == ["x", "y", "z"]
    assert list(rows["joint_pos_rel"]["properties"]) == list(joints.names)
    out = tmp_path / "terms.mcap"
    mcap_export.export_mcap(log, out)
    _, messages = _read_mcap(out)
    (message,) = [data for topic, _, data in messages if topic == "/inputs/observation"]
    assert message["rows"][0]["base_ang_vel"] == {"x": 3.0, "y": 4.0, "z": 5.0}
    assert message["rows"][0]["joint_pos_rel"][joints.names[0]] == 12.0
