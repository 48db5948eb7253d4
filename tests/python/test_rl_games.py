"""tdaot.from_rl_games: rl_games 1.6 runs as they come.

The runs are trained here by rl_games' own Runner (a2c_continuous, a few epochs on a tiny vector
environment registered the way Isaac Lab registers its wrapper), saved by rl_games' own
checkpointing: nn/<name>.pth, the best, beside last_<name>_ep_<N>_rew_<R>.pth. One run compiles
its model as rl_games does by default (torch.compile, here with dynamo disabled so nothing is
compiled: the saved keys carry the ``_orig_mod.`` prefix all the same). The rebuilt actor is
compared with rl_games' own player (PpoPlayerContinuous, restored from the same file) behind
Isaac Lab's wrapper: observations clamped to ±clip_observations, the player's clamp and rescale to
the wrapper's ±clip_actions action space. One package is built through `tdaot build --run`.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import gymnasium
import pytest
import torch
import yaml
from rl_games.algos_torch.players import PpoPlayerContinuous
from rl_games.common import env_configurations, vecenv
from rl_games.torch_runner import Runner
from tensordict import TensorDict

import tdaot
from tdaot.cli import main
from tdaot.trained.rl_games import from_rl_games

OBS, ACTIONS, ENVS = 5, 2, 8
CLIP_OBS, CLIP_ACTIONS = 4.0, 2.0
EPOCHS = 3
TOL = 1e-5


class _TinyVecEnv(vecenv.IVecEnv):
    """A point following a target: observations [5], actions [2], episodes of 5 steps."""

    def __init__(self, config_name, num_actors, **kwargs) -> None:
        self.generator = torch.Generator().manual_seed(0)
        self.state = torch.randn(ENVS, OBS, generator=self.generator) * 2 + 1
        self.steps = torch.zeros(ENVS, dtype=torch.long)

    def step(self, actions):
        self.state[:, :ACTIONS] += 0.1 * torch.as_tensor(actions).clamp(-CLIP_ACTIONS, CLIP_ACTIONS)
        reward = -(self.state[:, :ACTIONS] - self.state[:, ACTIONS : 2 * ACTIONS]).square().sum(-1)
        self.steps += 1
        done = self.steps >= 5
        self.state[done] = torch.randn(int(done.sum()), OBS, generator=self.generator) * 2 + 1
        self.steps[done] = 0
        return self.state.clamp(-CLIP_OBS, CLIP_OBS), reward, done, {}

    def reset(self):
        return self.state.clamp(-CLIP_OBS, CLIP_OBS)

    def get_number_of_agents(self) -> int:
        return 1

    def get_env_info(self) -> dict:
        return _env_info()


def _env_info() -> dict:
    """The spaces Isaac Lab's RlGamesVecEnvWrapper gives: ±clip_observations, ±clip_actions."""
    return {
        "action_space": gymnasium.spaces.Box(-CLIP_ACTIONS, CLIP_ACTIONS, (ACTIONS,)),
        "observation_space": gymnasium.spaces.Box(-CLIP_OBS, CLIP_OBS, (OBS,)),
    }


vecenv.register(
    "TdaotTinyVec", lambda config_name, num_actors, **kwargs: _TinyVecEnv(config_name, num_actors)
)
env_configurations.register(
    "tdaot_tiny", {"vecenv_type": "TdaotTinyVec", "env_creator": lambda **kwargs: None}
)


def _params(name: str, train_dir, *, normalize: bool, compiled: bool, activation: str, rnn=None) -> dict:
    """rl_games' params as Isaac Lab's rl_games agent.yaml holds them."""
    params = {
        "seed": 42,
        "algo": {"name": "a2c_continuous"},
        "model": {"name": "continuous_a2c_logstd"},
        "network": {
            "name": "actor_critic",
            "separate": False,
            "space": {
                "continuous": {
                    "mu_activation": "None",
                    "sigma_activation": "None",
                    "mu_init": {"name": "default"},
                    "sigma_init": {"name": "const_initializer", "val": 0},
                    "fixed_sigma": True,
                }
            },
            "mlp": {
                "units": [16, 8],
                "activation": activation,
                "d2rl": False,
                "initializer": {"name": "default"},
            },
        },
        "config": {
            "name": name,
            "env_name": "tdaot_tiny",
            "device": "cpu",
            "device_name": "cpu",
            "multi_gpu": False,
            "ppo": True,
            "mixed_precision": False,
            "normalize_input": normalize,
            "normalize_value": True,
            "value_bootstrap": True,
            "num_actors": ENVS,
            "reward_shaper": {"scale_value": 1.0},
            "normalize_advantage": True,
            "gamma": 0.99,
            "tau": 0.95,
            "learning_rate": 3e-3,
            "lr_schedule": "adaptive",
            "kl_threshold": 0.008,
            "score_to_win": 20000,
            "max_epochs": EPOCHS,
            "save_best_after": 1,
            "save_frequency": 1,
            "grad_norm": 1.0,
            "entropy_coef": 0.0,
            "truncate_grads": True,
            "e_clip": 0.2,
            "horizon_length": 8,
            "minibatch_size": 32,
            "mini_epochs": 2,
            "critic_coef": 4,
            "clip_value": True,
            "bounds_loss_coef": 0.0001,
            "torch_compile": compiled,
            "train_dir": str(train_dir),
            "full_experiment_name": name,
        },
        "env": {"clip_observations": CLIP_OBS, "clip_actions": CLIP_ACTIONS},
    }
    if rnn is not None:
        params["network"]["rnn"] = rnn
        params["config"]["seq_length"] = 4
    return params


RUNS = {
    "compiled_norm": {"normalize": True, "compiled": True, "activation": "elu"},
    "plain": {"normalize": False, "compiled": False, "activation": "tanh"},
}
# rl_games' RNN models: an LSTM before the MLP with its layer norm (IsaacGymEnvs' LSTM tasks), a
# 2-layer GRU after it.
RNN_RUNS = {
    "lstm": {"name": "lstm", "units": 8, "layers": 1, "before_mlp": True, "layer_norm": True},
    "gru": {"name": "gru", "units": 8, "layers": 2, "before_mlp": False},
}


def _train(root, runs: dict) -> dict:
    import torch._dynamo.config as dynamo_config

    made = {}
    saved = dynamo_config.disable
    dynamo_config.disable = True  # rl_games' torch.compile wraps the model (its keys), compiles nothing
    try:
        for name, options in runs.items():
            params = _params(name, root, **options)
            runner = Runner()
            runner.load({"params": copy.deepcopy(params)})
            runner.reset()
            runner.run({"train": True, "play": False, "sigma": None})
            run = root / name
            (run / "params").mkdir()
            (run / "params" / "agent.yaml").write_text(yaml.dump({"params": params}))
            made[name] = (run, params)
    finally:
        dynamo_config.disable = saved
    return made


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (run directory, params): trained and saved by rl_games' Runner."""
    return _train(tmp_path_factory.mktemp("rl_games"), RUNS)


@pytest.fixture(scope="module")
def rnn_runs(tmp_path_factory):
    """The RNN models, trained and saved by rl_games' Runner."""
    options = {"normalize": True, "compiled": False, "activation": "elu"}
    return _train(
        tmp_path_factory.mktemp("rl_games_rnn"), {n: {**options, "rnn": r} for n, r in RNN_RUNS.items()}
    )


@pytest.mark.parametrize("name", list(RNN_RUNS))
def test_rnn_models_match_the_player_over_steps_with_resets(rnn_runs, name):
    run, params = rnn_runs[name]
    policy, example = from_rl_games(run)
    keys = ["recurrent_state_h", "recurrent_state_c"] if name == "lstm" else ["recurrent_state"]
    assert policy.in_keys == ["observation", *keys, "is_init"]
    assert example[keys[0]].shape == (1, RNN_RUNS[name]["layers"], 8)
    player = _player(params, policy.source)
    player.batch_size = ENVS
    player.init_rnn()
    td = policy.example(ENVS)
    generator = torch.Generator().manual_seed(4)
    worst = 0.0
    for _ in range(8):
        obs = torch.randn(ENVS, OBS, generator=generator) * 3
        expected = player.get_action(obs.clamp(-CLIP_OBS, CLIP_OBS), is_deterministic=True)
        td["observation"] = obs
        with torch.no_grad():
            out = policy(td.clone())
        worst = max(worst, (out["action"] - expected).abs().max().item())
        dones = torch.rand(ENVS, generator=generator) < 0.3
        for state in player.states:  # the player zeroes a finished env's state
            state[:, dones, :] = 0.0
        for key in policy.state_keys:
            td[key] = out["next", key]
        td["is_init"] = dones.reshape(ENVS, 1)
    assert worst <= TOL, worst


def test_rnn_config_refusals(rnn_runs, tmp_path):
    run, params = rnn_runs["lstm"]
    for edit, match in (
        (lambda p: p["network"]["rnn"].update(concat_output=True), r"rnn.concat_output is true"),
        (lambda p: p["network"]["rnn"].update(name="identity"), r"rnn.name is 'identity'"),
        (lambda p: p["network"]["rnn"].update(units=16), r"rnn is .* but .* is a lstm of 1 layers, 8 units"),
        (
            lambda p: p["network"]["rnn"].update(layer_norm=False),
            r"layer_norm is False but .* has a2c_network",
        ),
        (
            lambda p: p["network"].pop("rnn"),
            r"holds .*'a2c_network.rnn.rnn.weight_ih_l0'.* no params.network.rnn",
        ),
    ):
        edited = copy.deepcopy(params)
        edit(edited)
        with pytest.raises(tdaot.InvalidArgumentError, match=match):
            from_rl_games(run, agent={"params": edited})


def _player(params, checkpoint) -> PpoPlayerContinuous:
    """rl_games' own player, restored from the checkpoint, as Isaac Lab's play script runs it."""
    config = copy.deepcopy(params)
    config["config"]["env_info"] = _env_info()
    player = PpoPlayerContinuous(config)
    player.restore(str(checkpoint))
    player.has_batch_dimension = True
    return player


def _compare(policy, player, steps: int = 5) -> float:
    generator = torch.Generator().manual_seed(1)
    worst = 0.0
    for _ in range(steps):
        obs = torch.randn(ENVS, OBS, generator=generator) * 3 + 1  # some beyond ±CLIP_OBS
        expected = player.get_action(obs.clamp(-CLIP_OBS, CLIP_OBS), is_deterministic=True)
        expected = expected.clamp(-CLIP_ACTIONS, CLIP_ACTIONS)  # the wrapper's clamp
        with torch.no_grad():
            got = policy(TensorDict({"observation": obs}, batch_size=[ENVS]))["action"]
        worst = max(worst, (got - expected).abs().max().item())
    return worst


@pytest.mark.parametrize("name", list(RUNS))
def test_actions_match_the_rl_games_player(runs, name):
    run, params = runs[name]
    saved = {p.name for p in (run / "nn").glob("*.pth")}
    assert f"{name}.pth" in saved and any(s.startswith(f"last_{name}_ep_") for s in saved), saved
    checkpoint = torch.load(run / "nn" / f"{name}.pth", weights_only=False)
    assert any(k.startswith("_orig_mod.") for k in checkpoint["model"]) == RUNS[name]["compiled"]
    policy, example = tdaot.from_rl_games(run)
    assert policy.source == str(run / "nn" / f"{name}.pth")
    assert "best save" in policy.chosen
    assert policy.normalize == RUNS[name]["normalize"]
    assert example["observation"].shape == (1, OBS)
    assert _compare(policy, _player(params, policy.source)) <= TOL


def test_a_named_checkpoint_file(runs):
    run, params = runs["compiled_norm"]
    last = sorted((run / "nn").glob("last_compiled_norm_ep_1_*.pth"))[0]
    policy, _ = from_rl_games(last)
    assert policy.source == str(last) and policy.chosen == "the file given"
    assert _compare(policy, _player(params, last)) <= TOL
    best, _ = from_rl_games(run)
    x = TensorDict({"observation": torch.randn(3, OBS)}, batch_size=[3])
    assert not torch.equal(best(x.clone())["action"], policy(x.clone())["action"])


def test_the_action_range_without_isaac_lab_clip_actions(runs):
    run, params = runs["plain"]
    agent = {"params": copy.deepcopy(params)}
    del agent["params"]["env"]
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"has no params.env.clip_actions .*give action_range"
    ):
        from_rl_games(run, agent=agent)
    policy, _ = from_rl_games(run, agent=agent, action_range=(-CLIP_ACTIONS, CLIP_ACTIONS))
    player = _player(params, policy.source)
    obs = torch.randn(4, OBS) * 2
    with torch.no_grad():
        got = policy(TensorDict({"observation": obs}, batch_size=[4]))["action"]
    assert (got - player.get_action(obs, is_deterministic=True)).abs().max().item() <= TOL
    agent["params"]["config"]["clip_actions"] = False  # the player returns the mean as it is
    player.clip_actions = False
    raw, _ = from_rl_games(run, agent=agent)
    with torch.no_grad():
        got = raw(TensorDict({"observation": obs}, batch_size=[4]))["action"]
    assert (got - player.get_action(obs, is_deterministic=True)).abs().max().item() <= TOL


def test_rl_games_is_not_needed(runs):
    run, _ = runs["compiled_norm"]
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["rl_games"] = None  # any import of rl_games now raises ImportError
        import tdaot
        policy, example = tdaot.from_rl_games({str(run)!r})
        print(policy(example)["action"].shape)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"torch.Size([1, {ACTIONS}])"


def test_run_directory_mistakes_are_named(tmp_path, runs):
    run, params = runs["plain"]
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"is neither an rl_games run directory nor a checkpoint"
    ):
        from_rl_games(tmp_path / "missing")
    with pytest.raises(tdaot.InvalidArgumentError, match=r"has no params/agent.yaml in run .*give agent="):
        from_rl_games(tmp_path)
    (tmp_path / "nn").mkdir()
    (tmp_path / "nn" / "other.pth").write_bytes((run / "nn" / "plain.pth").read_bytes())
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"has no nn/plain.pth .*\.pth files in nn/: 'other.pth'; name one"
    ):
        from_rl_games(tmp_path, agent={"params": params})
    agent = {"params": copy.deepcopy(params)}
    agent["params"]["config"]["name"] = 7
    with pytest.raises(tdaot.InvalidArgumentError, match=r"params.config.name is 7"):
        from_rl_games(tmp_path, agent=agent)


def _refused(tmp_path, runs, match, *, edit_checkpoint=None, edit_params=None):
    run, params = runs["compiled_norm"]
    checkpoint = torch.load(run / "nn" / "compiled_norm.pth", weights_only=False)
    params = copy.deepcopy(params)
    if edit_checkpoint:
        edit_checkpoint(checkpoint)
    if edit_params:
        edit_params(params)
    torch.save(checkpoint, tmp_path / "x.pth")
    with pytest.raises(tdaot.InvalidArgumentError, match=match):
        from_rl_games(tmp_path / "x.pth", agent={"params": params})


@pytest.mark.parametrize(
    ("edit_checkpoint", "edit_params", "match"),
    [
        (lambda c: c.pop("model"), None, r"top-level keys .*'epoch'.*; expected 'model'"),
        (
            lambda c: c["model"].update({"a2c_network.attention.weight": torch.zeros(1)}),
            None,
            r"keys tdaot does not know: 'a2c_network.attention.weight'; expected running_mean_std",
        ),
        (
            lambda c: c["model"].update({"a2c_network.rnn.rnn.weight_ih_l0": torch.zeros(1)}),
            None,
            r"holds 'a2c_network.rnn.rnn.weight_ih_l0' but the config has no params.network.rnn",
        ),
        (
            None,
            lambda p: p["network"].update({"rnn": {"name": "lstm", "units": 8}}),
            r"recurrent layer keys none; expected 'a2c_network.rnn.rnn.bias_hh_l0'",
        ),
        (None, lambda p: p["network"]["mlp"].update({"d2rl": True}), r"mlp.d2rl is true"),
        (None, lambda p: p["network"].update({"space": {"discrete": {}}}), r"space is 'discrete'"),
        (None, lambda p: p["model"].update({"name": "discrete_a2c"}), r"model.name is 'discrete_a2c'"),
        (
            None,
            lambda p: p["network"]["mlp"].update({"units": [16, 4]}),
            r"units is \[16, 4\] but .* \[16, 8\]",
        ),
        (None, lambda p: p["network"]["mlp"].update({"activation": "prelu"}), r"activation is 'prelu'"),
        (None, lambda p: p["config"].update({"normalize_input": False}), r"normalize_input is False but"),
        (None, lambda p: p["env"].update({"clip_actions": "big"}), r"params.env.clip_actions is 'big'"),
    ],
)
def test_refusals_name_the_key(tmp_path, runs, edit_checkpoint, edit_params, match):
    _refused(tmp_path, runs, match, edit_checkpoint=edit_checkpoint, edit_params=edit_params)


# --- one package: `tdaot build --run`, batch 1 (one compile: the model the lite runtime runs) --
@pytest.fixture(scope="module")
def built(runs, tmp_path_factory):
    run, _ = runs["compiled_norm"]
    out = tmp_path_factory.mktemp("rl_games_cli") / "rl_games.pt2"
    assert main(["build", "--run", str(run), "--batch", "1", "-o", str(out)]) == 0
    return out


def test_the_command_line_builds_an_rl_games_run(built, runs):
    run, params = runs["compiled_norm"]
    policy, _ = from_rl_games(run)
    player = _player(params, policy.source)
    native = tdaot.load(str(built))
    generator = torch.Generator().manual_seed(3)
    for _ in range(4):
        example = TensorDict({"observation": torch.randn(1, OBS, generator=generator) * 3}, batch_size=[1])
        tdaot.testing.assert_parity(policy, str(built), example, atol=TOL, rtol=0)
        tdaot.testing.assert_parity(policy, str(built), example, runtime="lite", atol=TOL, rtol=0)
        expected = player.get_action(example["observation"].clamp(-CLIP_OBS, CLIP_OBS), is_deterministic=True)
        got = native(example.clone())["action"]
        assert (got - expected).abs().max().item() <= TOL


def test_an_rnn_package_steps_natively_and_lite(rnn_runs, tmp_path):
    run, params = rnn_runs["lstm"]
    policy, example = from_rl_games(run)
    out = str(tdaot.build(policy, example, str(tmp_path / "lstm.pt2"), batch=1).path)
    session = tdaot.load(out).session(batch=1)
    player = _player(params, policy.source)
    player.batch_size = 1
    player.init_rnn()
    generator = torch.Generator().manual_seed(6)
    worst = 0.0
    for index in range(8):
        if index == 4:  # an episode ends: both start the next from zero state
            session.reset(torch.ones(1, dtype=torch.bool))
            for state in player.states:
                state.zero_()
        obs = torch.randn(1, OBS, generator=generator) * 3
        expected = player.get_action(obs.clamp(-CLIP_OBS, CLIP_OBS), is_deterministic=True)
        worst = max(worst, (session.step({"observation": obs})["action"] - expected).abs().max().item())
    assert worst <= TOL, worst
    tdaot.testing.assert_parity(policy, out, example, runtime="lite", atol=TOL, rtol=0)
