"""tdaot.from_skrl: skrl 2.x runs as they come.

The runs are trained here by skrl's own Runner (the one Isaac Lab's skrl scripts use) on
gymnasium's Pendulum, a few PPO updates each, its checkpoints written by skrl's own
write_checkpoint, its config dumped as Isaac Lab dumps params/agent.yaml. The rebuilt actor is
compared with skrl's own agent (loaded from the same checkpoint by a fresh Runner) over steps of
the environment: its ``mean_actions``, what skrl's trainers evaluate with. One package is built,
through `tdaot build --run`, and checked natively and on the lite runtime.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest
import torch
import yaml
from skrl.envs.wrappers.torch import wrap_env
from skrl.utils.runner.torch import Runner
from tensordict import TensorDict

import tdaot
from tdaot.cli import main
from tdaot.trained.skrl import from_skrl

ENVS, TIMESTEPS, INTERVAL = 4, 48, 16
TOL = 1e-5


def _cfg(name: str, directory, *, separate: bool, normalize: bool, activations, output: str) -> dict:
    """A skrl Runner config in Isaac Lab's skrl agent.yaml layout."""
    network = [{"name": "net", "input": "OBSERVATIONS", "layers": [16, 16], "activations": activations}]
    agent = {
        "class": "PPO",
        "rollouts": 16,
        "learning_epochs": 2,
        "mini_batches": 2,
        "value_preprocessor": "RunningStandardScaler",
        "value_preprocessor_kwargs": None,
        "experiment": {
            "directory": str(directory),
            "experiment_name": name,
            "write_interval": 0,
            "checkpoint_interval": INTERVAL,
        },
    }
    if normalize:
        agent["observation_preprocessor"] = "RunningStandardScaler"
        agent["observation_preprocessor_kwargs"] = None
    return {
        "seed": 42,
        "models": {
            "separate": separate,
            "policy": {
                "class": "GaussianMixin",
                "clip_actions": False,
                "clip_log_std": True,
                "min_log_std": -20.0,
                "max_log_std": 2.0,
                "initial_log_std": 0.0,
                "network": network,
                "output": output,
            },
            "value": {
                "class": "DeterministicMixin",
                "clip_actions": False,
                "network": network,
                "output": "ONE",
            },
        },
        "memory": {"class": "RandomMemory", "memory_size": -1},
        "agent": agent,
        "trainer": {"class": "SequentialTrainer", "timesteps": TIMESTEPS, "close_environment_at_exit": False},
    }


RUNS = {
    "shared_norm": {"separate": False, "normalize": True, "activations": "elu", "output": "ACTIONS"},
    "separate_tanh": {
        "separate": True,
        "normalize": False,
        "activations": ["relu", "tanh"],
        "output": "tanh(ACTIONS)",
    },
}


def _env():
    return wrap_env(gym.make_vec("Pendulum-v1", num_envs=ENVS, vectorization_mode="sync"), verbose=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (run directory, config): trained and saved by skrl's Runner."""
    root = tmp_path_factory.mktemp("skrl")
    made = {}
    for name, options in RUNS.items():
        cfg = _cfg(name, root, **options)
        Runner(_env(), copy.deepcopy(cfg)).run()
        run = root / name
        (run / "params").mkdir()
        (run / "params" / "agent.yaml").write_text(yaml.dump(cfg))  # the full dumper, as Isaac Lab
        made[name] = (run, cfg)
    return made


def _skrl_agent(cfg, checkpoint):
    """skrl's own agent for the checkpoint, from a fresh Runner, in evaluation mode."""
    agent = Runner(_env(), copy.deepcopy(cfg)).agent
    agent.load(str(checkpoint))
    agent.enable_training_mode(False, apply_to_models=True)
    return agent


def _rollout(policy, agent, steps: int = 6) -> float:
    """Both fed the observations of an environment stepped with skrl's mean actions (scaled
    up, so the observations leave the normalizer's range too); the largest |difference|."""
    env = _env()
    obs, _ = env.reset()
    worst = 0.0
    with torch.no_grad():
        for _ in range(steps):
            _, outputs = agent.act(obs, None, timestep=0, timesteps=0)
            expected = outputs["mean_actions"]
            got = policy(TensorDict({"observation": obs.float()}, batch_size=[ENVS]))["action"]
            worst = max(worst, (got - expected).abs().max().item())
            obs, *_ = env.step(expected * 4)
    env.close()
    return worst


@pytest.mark.parametrize("name", list(RUNS))
def test_actions_match_skrl_agent(runs, name):
    run, cfg = runs[name]
    policy, example = tdaot.from_skrl(run)
    assert policy.source == str(run / "checkpoints" / f"agent_{TIMESTEPS}.pt")
    assert policy.normalize == RUNS[name]["normalize"]
    assert policy.in_keys == ["observation"] and policy.out_keys == ["action"]
    assert example["observation"].shape == (1, 3)
    assert _rollout(policy, _skrl_agent(cfg, policy.source)) <= TOL


def test_the_highest_timestep_numerically(runs, tmp_path):
    run, cfg = runs["shared_norm"]
    saved = sorted(p.name for p in (run / "checkpoints").glob("agent_*.pt"))
    assert saved == [f"agent_{t}.pt" for t in (INTERVAL, 2 * INTERVAL, TIMESTEPS)]
    # agent_100.pt sorts before agent_48.pt as text: the number decides.
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "agent_100.pt").write_bytes(
        (run / "checkpoints" / "agent_16.pt").read_bytes()
    )
    (tmp_path / "checkpoints" / "agent_48.pt").write_bytes((run / "checkpoints" / "agent_48.pt").read_bytes())
    policy, _ = from_skrl(tmp_path, agent=run / "params" / "agent.yaml")
    assert policy.source.endswith("agent_100.pt") and "highest timestep of 2" in policy.chosen
    assert _rollout(policy, _skrl_agent(cfg, run / "checkpoints" / "agent_16.pt")) <= TOL
    # The checkpoints folder, and one file, with the run's params/agent.yaml found above it.
    folder, _ = from_skrl(run / "checkpoints")
    single, _ = from_skrl(run / "checkpoints" / "agent_32.pt")
    assert folder.source.endswith(f"agent_{TIMESTEPS}.pt") and single.chosen == "the file given"
    assert _rollout(single, _skrl_agent(cfg, run / "checkpoints" / "agent_32.pt")) <= TOL
    # best_agent.pt where no agent_<t>.pt is.
    best = tmp_path / "best"
    best.mkdir()
    (best / "best_agent.pt").write_bytes((run / "checkpoints" / "agent_32.pt").read_bytes())
    policy, _ = from_skrl(best, agent=cfg)
    assert policy.chosen == "best_agent.pt (no agent_<t>.pt saved)"


def test_skrl_is_not_needed(runs):
    run, _ = runs["separate_tanh"]
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["skrl"] = None  # any import of skrl now raises ImportError
        import tdaot
        policy, example = tdaot.from_skrl({str(run)!r})
        print(policy(example)["action"].shape)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch.Size([1, 1])"


def _checkpoint(runs, name="shared_norm"):
    run, cfg = runs[name]
    return torch.load(run / "checkpoints" / f"agent_{TIMESTEPS}.pt", weights_only=True), copy.deepcopy(cfg)


def _refused(tmp_path, checkpoint, cfg, match):
    torch.save(checkpoint, tmp_path / "agent_1.pt")
    with pytest.raises(tdaot.InvalidArgumentError, match=match):
        from_skrl(tmp_path / "agent_1.pt", agent=cfg)


def test_run_directory_mistakes_are_named(tmp_path, runs):
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"has no checkpoints/agent_<timestep>.pt nor best_agent"
    ):
        from_skrl(tmp_path)
    with pytest.raises(tdaot.InvalidArgumentError, match=r"is neither a skrl run directory nor a checkpoint"):
        from_skrl(tmp_path / "missing")
    checkpoint, _ = _checkpoint(runs)
    torch.save(checkpoint, tmp_path / "agent_5.pt")
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"has no params/agent.yaml in its run .*give agent="
    ):
        from_skrl(tmp_path)
    (tmp_path / "agent_6.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"cannot read skrl checkpoint '.*agent_6.pt' as tensors"
    ):
        from_skrl(tmp_path / "agent_6.pt", agent={})


def test_layout_refusals_name_the_keys(tmp_path, runs):
    checkpoint, cfg = _checkpoint(runs)
    _refused(tmp_path, {"weights": {}}, cfg, r"top-level keys 'weights'; expected 'policy'")
    extra = copy.deepcopy(checkpoint)
    extra["policy"]["attention.weight"] = torch.zeros(2)
    _refused(tmp_path, extra, cfg, r"keys tdaot does not know: 'attention.weight'; expected net_container")
    rnn = copy.deepcopy(checkpoint)
    rnn["policy"]["rnn.weight_ih_l0"] = torch.zeros(8, 3)
    _refused(tmp_path, rnn, cfg, r"recurrent layer \('rnn.weight_ih_l0'\).*RNN/GRU/LSTM")
    old = copy.deepcopy(checkpoint)
    old["state_preprocessor"] = old.pop("observation_preprocessor")
    _refused(tmp_path, old, cfg, r"'state_preprocessor' but no 'observation_preprocessor'.*1.4.x")
    wide = copy.deepcopy(checkpoint)
    wide["policy"]["net_container.0.weight"] = torch.zeros(32, 3)
    wide["policy"]["net_container.0.bias"] = torch.zeros(32)
    _refused(tmp_path, wide, cfg, r"net_container.0.weight has 32 outputs but the config's layer 0 has 16")
    stats = copy.deepcopy(checkpoint)
    stats["observation_preprocessor"]["running_mean"] = torch.zeros(4, dtype=torch.float64)
    _refused(tmp_path, stats, cfg, r"'observation_preprocessor' running_mean is \[4\], expected \[3\]")
    broken = copy.deepcopy(checkpoint)
    del broken["policy"]["net_container.2.bias"]
    _refused(tmp_path, broken, cfg, r"net_container.2.weight and net_container.2.bias must both be present")


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda c: c["models"]["policy"].update({"class": "CategoricalMixin"}),
            r"class is 'CategoricalMixin'",
        ),
        (lambda c: c["models"]["policy"].update({"output": "2 * ACTIONS"}), r"output is '2 \* ACTIONS'"),
        (lambda c: c["models"]["policy"].update({"clip_mean_actions": True}), r"clip_mean_actions is true"),
        (lambda c: c["models"]["policy"]["network"][0].update({"input": "STATES"}), r"input is 'STATES'"),
        (lambda c: c["models"]["policy"]["network"][0].update({"activations": "swish"}), r"has 'swish'"),
        (lambda c: c["models"]["policy"]["network"][0].update({"layers": [{"conv2d": 3}]}), r"layers\[0\]"),
        (lambda c: c.pop("models"), r"has no 'models'"),
    ],
)
def test_config_refusals_name_the_entry(tmp_path, runs, edit, match):
    checkpoint, cfg = _checkpoint(runs)
    edit(cfg)
    _refused(tmp_path, checkpoint, cfg, match)


# --- one package: `tdaot build --run` -------------------------------------------------------
@pytest.fixture(scope="module")
def built(runs, tmp_path_factory):
    run, _ = runs["shared_norm"]
    out = tmp_path_factory.mktemp("skrl_cli") / "skrl.pt2"
    assert main(["build", "--run", str(run), "-o", str(out)]) == 0
    return out


def test_the_command_line_builds_a_skrl_run(built, runs):
    run, cfg = runs["shared_norm"]
    policy, _ = from_skrl(run)
    manifest = tdaot.read_manifest(built)
    assert [spec.key for spec in manifest.inputs] == ["observation"]
    generator = torch.Generator().manual_seed(3)
    example = TensorDict({"observation": torch.randn(ENVS, 3, generator=generator) * 4}, batch_size=[ENVS])
    tdaot.testing.assert_parity(policy, str(built), example, atol=TOL, rtol=0)
    tdaot.testing.assert_parity(policy, str(built), example[:1], runtime="lite", atol=TOL, rtol=0)
    agent = _skrl_agent(cfg, policy.source)
    native = tdaot.load(str(built))
    with torch.no_grad():
        _, outputs = agent.act(example["observation"], None, timestep=0, timesteps=0)
    got = native(example.clone())["action"]
    assert (got - outputs["mean_actions"]).abs().max().item() <= TOL


# --- tdaot.from_run and `tdaot build --run` say it is skrl's --------------------------------
def test_from_run_and_the_command_line_say_skrl(runs, tmp_path, capsys, monkeypatch):
    run, _ = runs["shared_norm"]
    policy, _ = tdaot.from_run(run)
    assert policy.trained_with.library == "skrl" and "agent_48.pt" in policy.trained_with.evidence
    single, _ = tdaot.from_run(run / "checkpoints" / "agent_16.pt")
    assert single.trained_with.library == "skrl" and "'policy'" in single.trained_with.evidence
    built = {}

    def fake_build(module, example, path, **options):
        built.update(module=module, options=options)
        raise tdaot.BuildError("stopped before compiling")

    monkeypatch.setattr("tdaot.cli.build", fake_build)
    (tmp_path / "c.toml").write_text("control_dt = 0.02\n")
    out = str(tmp_path / "x.pt2")
    assert main(["build", "--run", str(run), "--contract", str(tmp_path / "c.toml"), "-o", out]) == 1
    err = capsys.readouterr().err
    assert f"{run}: skrl actor from {run / 'checkpoints' / 'agent_48.pt'}" in err
    assert "skrl run (3 skrl checkpoint(s)" in err and "contract from --contract" in err
    assert built["options"]["contract"].control_dt == 0.02 and built["module"].library == "skrl"
    calls = []

    def from_deploy(path, *, joint_names=None, mjcf=None, input_key="policy", supervisor=True):
        calls.append((str(path), joint_names, mjcf, input_key))
        assert supervisor is True  # the deployment file's default supervisor
        return tdaot.Contract(control_dt=0.02)

    monkeypatch.setattr(tdaot.Contract, "from_deploy", from_deploy, raising=False)
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text("step_dt: 0.02\n")
    assert main(["build", "--run", str(run), "--deploy", str(deploy), "--joint-names", "a,b", "-o", out]) == 1
    assert calls == [(str(deploy), ["a", "b"], None, "observation")]
    assert f"contract from {deploy}" in capsys.readouterr().err
    assert main(["build", "--run", str(run), "--checkpoint", "3", "-o", out]) == 1
    assert "checkpoint=3 chooses an rsl_rl iteration; for a skrl run give" in capsys.readouterr().err
    assert main(["build", "--run", str(run), "--mjcf", "robot.xml", "-o", out]) == 1
    assert "mjcf maps a deployment file's joints, but no deploy file was given" in capsys.readouterr().err


def test_a_config_entry_names_a_run_of_any_library(runs, tmp_path):
    from tdaot.builder.config import load_config

    run, _ = runs["separate_tanh"]
    config = tmp_path / "tdaot.toml"
    config.write_text(f"[[artifact]]\nname = 'pendulum'\nrun = '{run}'\nbatch = 1\n")
    (spec,) = load_config(config)
    assert spec.factory is None and spec.rsl_rl.path == str(run)
    module, example, options = spec.load()
    assert module.library == "skrl" and module.trained_with.library == "skrl"
    assert options.contract is None and list(example.keys()) == ["observation"]
    config.write_text(f"[[artifact]]\nname = 'p'\nrun = '{run}'\nfactory = 'p.py:f'\n")
    with pytest.raises(tdaot.ConfigError, match=r"field 'run': give one of factory, rsl_rl or run"):
        load_config(config)
    config.write_text("[[artifact]]\nname = 'p'\n")
    with pytest.raises(
        tdaot.ConfigError, match=r"field 'factory': missing \(or rsl_rl: .*; or run: a run of any"
    ):
        load_config(config)
