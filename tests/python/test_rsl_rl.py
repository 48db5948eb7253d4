"""tdaot.from_rsl_rl and `tdaot build --rsl-rl`: rsl_rl runs as they come.

The 4.x-5.x checkpoints are written by rsl-rl-lib's own OnPolicyRunner (a few PPO iterations on
a tiny TensorDict environment below) and the rebuilt actor is compared with rsl_rl's own
inference policy over steps with resets. The 2.x-3.x checkpoints are made here with exactly the
keys and shapes those versions' ActorCritic / ActorCriticRecurrent and runner save, and compared
with a forward written out below (gate equations included). One package is built, through the
command line, and checked against the eager policy in the full runtime.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import yaml
from rsl_rl.runners import OnPolicyRunner
from rsl_rl.utils import LogWriter
from tensordict import TensorDict

import tdaot
from tdaot.cli import main
from tdaot.trained.rsl_rl import RslRlPolicy, from_rsl_rl

POLICY_OBS, CRITIC_OBS, ACTIONS, ENVS = 5, 3, 3, 6
ITERATIONS = 2  # the runner saves model_0.pt, model_1.pt: NEWEST is the last
NEWEST = ITERATIONS - 1
TOL = 1e-5


class _TinyEnv:
    """A VecEnv (rsl_rl.env.VecEnv's attributes and methods): a point that should follow a
    target; observation groups "policy" [5] and "privileged" [3], episodes of 4-7 steps."""

    def __init__(self, seed: int = 0) -> None:
        self.num_envs, self.num_actions, self.max_episode_length = ENVS, ACTIONS, 7
        self.device, self.cfg = "cpu", {}
        self.generator = torch.Generator().manual_seed(seed)
        self.episode_length_buf = torch.zeros(ENVS, dtype=torch.long)
        self.state = torch.randn(ENVS, POLICY_OBS, generator=self.generator) * 2 + 1

    def get_observations(self) -> TensorDict:
        privileged = self.state[:, :CRITIC_OBS] ** 2
        return TensorDict({"policy": self.state.clone(), "privileged": privileged}, batch_size=[ENVS])

    def step(self, actions):
        self.state[:, :ACTIONS] += 0.1 * actions
        reward = -(self.state[:, :ACTIONS] - self.state[:, ACTIONS - 1 :]).square().sum(-1)
        self.episode_length_buf += 1
        done = self.episode_length_buf >= 4 + torch.randint(0, 4, (ENVS,), generator=self.generator)
        self.state[done] = torch.randn(int(done.sum()), POLICY_OBS, generator=self.generator) * 2 + 1
        self.episode_length_buf[done] = 0
        return self.get_observations(), reward, done.long(), {"time_outs": torch.zeros(ENVS)}


class _NoWriter(LogWriter):
    """rsl_rl's writer interface, writing nothing (no tensorboard files in the run)."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir

    def add_scalar(self, tag, scalar_value, global_step) -> None:
        pass


def _train_cfg(model: str, normalize: bool, **rnn) -> dict:
    actor = {
        "class_name": model,
        "hidden_dims": (16, 8),  # a tuple, dumped as !!python/tuple as Isaac Lab's dumps are
        "activation": "elu",
        "obs_normalization": normalize,
        "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"},
        **rnn,
    }
    critic = {k: v for k, v in actor.items() if k != "distribution_cfg"}
    return {
        "num_steps_per_env": 4,
        "save_interval": 1,
        "obs_groups": {"actor": ["policy"], "critic": ["policy", "privileged"]},
        "actor": actor,
        "critic": critic,
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": 1,
            "num_mini_batches": 1,
            "learning_rate": 1e-2,
            "schedule": "fixed",
        },
        "logger": "tensorboard",  # what the dump says; the runner below gets _NoWriter
    }


RUNS = {
    "mlp_norm": ("MLPModel", True, {}),
    "mlp": ("MLPModel", False, {}),
    "gru_norm": ("RNNModel", True, {"rnn_type": "gru", "rnn_hidden_dim": 8, "rnn_num_layers": 1}),
    "lstm": ("RNNModel", False, {"rnn_type": "lstm", "rnn_hidden_dim": 8, "rnn_num_layers": 2}),
}


def _runner(cfg: dict, log_dir) -> OnPolicyRunner:
    cfg = copy.deepcopy(cfg)
    cfg["logger"] = {"class_name": _NoWriter}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return OnPolicyRunner(_TinyEnv(), cfg, log_dir=log_dir and str(log_dir), device="cpu")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (run directory, train cfg): a few PPO iterations each, saved by rsl_rl's runner."""
    made = {}
    for name, (model, normalize, rnn) in RUNS.items():
        torch.manual_seed(0)
        run = tmp_path_factory.mktemp(name)
        cfg = _train_cfg(model, normalize, **rnn)
        (run / "params").mkdir()
        (run / "params" / "agent.yaml").write_text(yaml.dump(cfg))  # the full dumper, as Isaac Lab
        _runner(cfg, run).learn(num_learning_iterations=ITERATIONS)
        made[name] = (run, cfg)
    return made


def _rsl_rl_actor(run, cfg, iteration: int):
    """rsl_rl's own inference policy for the checkpoint, from a fresh runner."""
    runner = _runner(cfg, None)
    runner.load(str(run / f"model_{iteration}.pt"))
    actor = runner.get_inference_policy()
    actor.reset()  # the hidden state a fresh episode starts from
    return actor


def _rollout(policy: RslRlPolicy, reference, steps: int = 8, batch: int = ENVS) -> float:
    """Both stepped over the same observations; rows end episodes at random steps (rsl_rl
    resets them after the step, tdaot's policy sees is_init at the next). Largest |difference|."""
    generator = torch.Generator().manual_seed(1)
    td = policy.example(batch)
    worst = 0.0
    with torch.no_grad():
        for _ in range(steps):
            obs = torch.randn(batch, policy.obs_dims["policy"], generator=generator) * 3 + 1
            expected = reference(TensorDict({"policy": obs}, batch_size=[batch]))
            td["policy"] = obs
            out = policy(td.clone())
            worst = max(worst, (out["action"] - expected).abs().max().item())
            dones = torch.rand(batch, generator=generator) < 0.3
            if policy.state_keys:
                reference.reset(dones.long())
                for key in policy.state_keys:
                    td[key] = out["next", key]
                td["is_init"] = dones.reshape(batch, 1)
    return worst


@pytest.mark.parametrize("name", list(RUNS))
def test_actions_match_rsl_rl_inference(runs, name):
    run, cfg = runs[name]
    policy, example = tdaot.from_rsl_rl(run)
    assert policy.layout_generation == "4.x-5.x"
    assert policy.in_keys[0] == "policy" and policy.out_keys[0] == "action"
    assert policy.normalize == RUNS[name][1]
    assert example.batch_size == torch.Size([1])
    worst = _rollout(policy, _rsl_rl_actor(run, cfg, NEWEST))
    assert worst <= TOL, f"{name}: {worst}"


def test_the_newest_checkpoint_unless_one_is_named(runs):
    run, cfg = runs["mlp_norm"]
    assert sorted(p.name for p in run.glob("model_*.pt")) == [f"model_{i}.pt" for i in range(ITERATIONS)]
    newest, _ = from_rsl_rl(run)
    first, _ = from_rsl_rl(run, checkpoint=0)
    named, _ = from_rsl_rl(run, checkpoint="model_0.pt")
    file_with_agent, _ = from_rsl_rl(run / "model_0.pt", agent=cfg)
    file_beside_params, _ = from_rsl_rl(run / "model_0.pt")
    x = TensorDict({"policy": torch.randn(4, POLICY_OBS)}, batch_size=[4])
    assert not torch.equal(newest(x.clone())["action"], first(x.clone())["action"])
    for same in (named, file_with_agent, file_beside_params):
        assert torch.equal(same(x.clone())["action"], first(x.clone())["action"])
    assert _rollout(first, _rsl_rl_actor(run, cfg, 0)) <= TOL


def test_rsl_rl_is_not_needed(runs):
    """The checkpoint is read and the actor rebuilt with rsl_rl made unimportable."""
    run, _ = runs["lstm"]
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["rsl_rl"] = None  # any import of rsl_rl now raises ImportError
        import tdaot
        policy, example = tdaot.from_rsl_rl({str(run)!r})
        print(policy(example)["action"].shape)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch.Size([1, 3])"


def test_recurrent_keys_follow_torchrl(runs):
    gru, example = from_rsl_rl(runs["gru_norm"][0])
    assert gru.in_keys == ["policy", "recurrent_state", "is_init"]
    assert gru.out_keys == ["action", ("next", "recurrent_state")]
    assert example["recurrent_state"].shape == (1, 1, 8) and example["is_init"].all()
    lstm, example = from_rsl_rl(runs["lstm"][0])
    assert lstm.in_keys == ["policy", "recurrent_state_h", "recurrent_state_c", "is_init"]
    assert example["recurrent_state_c"].shape == (1, 2, 8)


# --- rsl_rl 2.x-3.x: the keys and shapes those versions save --------------------------------


def _linear(generator, rows, cols):
    return torch.randn(rows, cols, generator=generator) / math.sqrt(cols), torch.randn(
        rows, generator=generator
    )


def _mlp_entries(prefix, generator, dims):
    entries = {}
    for i, (cols, rows) in enumerate(zip(dims, dims[1:])):
        entries[f"{prefix}.{2 * i}.weight"], entries[f"{prefix}.{2 * i}.bias"] = _linear(
            generator, rows, cols
        )
    return entries


def _normalizer_entries(prefix, generator, n):
    var = torch.rand(1, n, generator=generator) * 4 + 0.1
    return {
        f"{prefix}_mean": torch.randn(1, n, generator=generator),
        f"{prefix}_var": var,
        f"{prefix}_std": var.sqrt(),
        f"{prefix}count": torch.tensor(4096),
    }


def _rnn_entries(prefix, generator, gates, inputs, hidden, layers):
    entries = {}
    for k in range(layers):
        width = inputs if k == 0 else hidden
        entries[f"{prefix}weight_ih_l{k}"], entries[f"{prefix}bias_ih_l{k}"] = _linear(
            generator, gates * hidden, width
        )
        entries[f"{prefix}weight_hh_l{k}"], entries[f"{prefix}bias_hh_l{k}"] = _linear(
            generator, gates * hidden, hidden
        )
    return entries


def _old_checkpoint(kind: str, generator) -> tuple[dict, dict]:
    """(checkpoint, agent config) as rsl_rl 3.x (ActorCritic, actor normalizer in the model),
    3.x ActorCriticRecurrent GRU with state-dependent std, or 2.x ActorCriticRecurrent LSTM
    (the runner's normalizer in obs_norm_state_dict, no obs_groups) saves them."""
    obs, hidden = 6, 8
    state: dict = {}
    checkpoint = {"optimizer_state_dict": {"state": {}, "param_groups": []}, "iter": 100, "infos": None}
    if kind == "3.x-mlp":
        state |= _mlp_entries("actor", generator, [obs, 16, 8, ACTIONS])
        state |= _normalizer_entries("actor_obs_normalizer.", generator, obs)
        state |= _normalizer_entries("critic_obs_normalizer.", generator, obs)
        state["log_std"] = torch.zeros(ACTIONS)
        policy = {
            "class_name": "ActorCritic",
            "actor_hidden_dims": [16, 8],
            "activation": "tanh",
            "actor_obs_normalization": True,
            "noise_std_type": "log",
        }
        config = {"obs_groups": {"policy": ["policy"], "critic": ["policy"]}, "policy": policy}
    elif kind == "3.x-gru":
        state |= _rnn_entries("memory_a.rnn.", generator, 3, obs, hidden, 1)
        state |= _mlp_entries("actor", generator, [hidden, 16, 2 * ACTIONS])
        policy = {
            "class_name": "rsl_rl.modules.ActorCriticRecurrent",
            "actor_hidden_dims": [16],
            "activation": "elu",
            "rnn_type": "gru",
            "rnn_hidden_dim": hidden,
            "state_dependent_std": True,
            "actor_obs_normalization": False,
        }
        config = {"obs_groups": {"policy": ["policy"], "critic": ["policy"]}, "policy": policy}
    else:  # 2.x-lstm
        state |= _rnn_entries("memory_a.rnn.", generator, 4, obs, hidden, 2)
        state |= _mlp_entries("actor", generator, [hidden, 16, ACTIONS])
        state["std"] = torch.ones(ACTIONS)
        checkpoint["obs_norm_state_dict"] = _normalizer_entries("", generator, obs)
        checkpoint["privileged_obs_norm_state_dict"] = _normalizer_entries("", generator, obs + 2)
        policy = {
            "class_name": "ActorCriticRecurrent",
            "actor_hidden_dims": [16],
            "activation": "selu",
            "rnn_type": "lstm",
            "rnn_hidden_size": hidden,
            "rnn_num_layers": 2,
        }
        config = {"empirical_normalization": True, "policy": policy}
    # The critic side, which tdaot leaves alone.
    critic_in = hidden if "memory_a.rnn.weight_ih_l0" in state else obs
    state |= _mlp_entries("critic", generator, [critic_in, 16, 1])
    if "memory_a.rnn.weight_ih_l0" in state:
        gates = state["memory_a.rnn.weight_ih_l0"].shape[0] // hidden
        state |= _rnn_entries("memory_c.rnn.", generator, gates, obs, hidden, 1 if gates == 3 else 2)
    checkpoint["model_state_dict"] = state
    return checkpoint, config


def _reference_step(checkpoint, config, obs, hidden):
    """rsl_rl 2.x-3.x act_inference written out: normalise, GRU/LSTM gates, MLP, mean."""
    state = checkpoint["model_state_dict"]
    norm = checkpoint.get("obs_norm_state_dict") or {
        k.split(".", 1)[1]: v for k, v in state.items() if k.startswith("actor_obs_normalizer.")
    }
    x = (obs - norm["_mean"]) / (norm["_std"] + 1e-2) if norm else obs
    new_hidden = []
    layer = 0
    while f"memory_a.rnn.weight_ih_l{layer}" in state:
        p = {n: state[f"memory_a.rnn.{n}_l{layer}"] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        gi = x @ p["weight_ih"].T + p["bias_ih"]
        if len(hidden[layer]) == 1:  # GRU
            (h,) = hidden[layer]
            gh = h @ p["weight_hh"].T + p["bias_hh"]
            r, z, n_i = gi.chunk(3, -1)
            hr, hz, hn = gh.chunk(3, -1)
            r, z = torch.sigmoid(r + hr), torch.sigmoid(z + hz)
            n = torch.tanh(n_i + r * hn)
            h = (1 - z) * n + z * h
            new_hidden.append((h,))
        else:  # LSTM
            h, c = hidden[layer]
            i, f, g, o = (gi + h @ p["weight_hh"].T + p["bias_hh"]).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            new_hidden.append((h, c))
        x = h
        layer += 1
    activation = {"elu": torch.nn.functional.elu, "tanh": torch.tanh, "selu": torch.selu}
    act = activation[config["policy"]["activation"]]
    linears = sorted({int(k.split(".")[1]) for k in state if k.startswith("actor.")})
    for position, index in enumerate(linears):
        x = x @ state[f"actor.{index}.weight"].T + state[f"actor.{index}.bias"]
        if position < len(linears) - 1:
            x = act(x)
    if config["policy"].get("state_dependent_std"):
        x = x.reshape(*x.shape[:-1], 2, ACTIONS)[..., 0, :]
    return x, new_hidden


@pytest.mark.parametrize("kind", ["3.x-mlp", "3.x-gru", "2.x-lstm"])
def test_old_checkpoints_match_a_written_out_forward(tmp_path, kind):
    generator = torch.Generator().manual_seed(3)
    checkpoint, config = _old_checkpoint(kind, generator)
    torch.save(checkpoint, tmp_path / "model_100.pt")
    policy, example = from_rsl_rl(tmp_path / "model_100.pt", agent=config)
    assert policy.layout_generation == "2.x-3.x" and policy.in_keys[0] == "policy"
    layers = [len(policy.state_keys)] * (policy.num_layers if policy.state_keys else 0)
    batch, worst = 5, 0.0
    td = policy.example(batch)
    hidden = [tuple(torch.zeros(batch, 8) for _ in range(n)) for n in layers]
    with torch.no_grad():
        for step in range(6):
            obs = torch.randn(batch, 6, generator=generator) * 2
            td["policy"] = obs
            out = policy(td.clone())
            expected, hidden = _reference_step(checkpoint, config, obs, hidden)
            worst = max(worst, (out["action"] - expected).abs().max().item())
            if policy.state_keys:
                dones = torch.arange(batch) == step % batch
                hidden = [tuple(torch.where(dones[:, None], 0.0, t) for t in layer) for layer in hidden]
                for key in policy.state_keys:
                    td[key] = out["next", key]
                td["is_init"] = dones.reshape(batch, 1)
    assert worst <= TOL, f"{kind}: {worst}"


def test_a_2_0_normalizer_without_its_count(tmp_path):
    """rsl_rl 2.0.x's EmpiricalNormalization keeps ``count`` as a plain attribute, so its
    obs_norm_state_dict holds only _mean, _var and _std."""
    checkpoint, config = _old_checkpoint("2.x-lstm", torch.Generator().manual_seed(5))
    torch.save(checkpoint, tmp_path / "model_100.pt")
    with_count, _ = from_rsl_rl(tmp_path / "model_100.pt", agent=config)
    del checkpoint["obs_norm_state_dict"]["count"]
    torch.save(checkpoint, tmp_path / "model_100.pt")
    without, example = from_rsl_rl(tmp_path / "model_100.pt", agent=config)
    assert without.normalize
    example["policy"] = torch.randn(1, 6)
    torch.testing.assert_close(without(example.clone())["action"], with_count(example.clone())["action"])


# --- refusals -----------------------------------------------------------------------------


# Isaac Lab's dump_yaml writes a config field left at dataclasses.MISSING as {} (class_to_dict of the
# sentinel): a unitree_rl_lab velocity run (rsl_rl 3.x, no obs_groups, no actor_obs_normalization
# set) leaves an agent.yaml of this shape.
ISAAC_LAB_3X_AGENT_YAML = """\
seed: 42
device: cuda:0
num_steps_per_env: 24
max_iterations: 50000
empirical_normalization: true
obs_groups: {}
clip_actions: null
save_interval: 100
experiment_name: unitree_g1_29dof_velocity
class_name: OnPolicyRunner
policy:
  class_name: ActorCritic
  init_noise_std: 1.0
  noise_std_type: log
  actor_obs_normalization: {}
  critic_obs_normalization: {}
  actor_hidden_dims:
  - 16
  - 8
  critic_hidden_dims:
  - 16
  - 8
  activation: tanh
algorithm:
  class_name: PPO
  symmetry_cfg: null
  rnd_cfg: null
"""

# mjlab's agent.yaml for an rsl_rl 5.x run (tuples as Python tags, clip_actions set).
MJLAB_5X_AGENT_YAML = """\
seed: 42
obs_groups:
  actor: !!python/tuple
  - actor
  critic: !!python/tuple
  - critic
clip_actions: 0.5
class_name: OnPolicyRunner
actor:
  hidden_dims: !!python/tuple
  - 16
  - 8
  activation: elu
  obs_normalization: true
  cnn_cfg: null
  distribution_cfg:
    class_name: GaussianDistribution
    init_std: 0.25
    std_range: !!python/tuple
    - 0.05
    - 0.5
    std_type: scalar
  rnn_type: null
  rnn_hidden_dim: 256
  rnn_num_layers: 1
  class_name: MLPModel
critic:
  hidden_dims: !!python/tuple
  - 16
  activation: elu
  obs_normalization: true
  distribution_cfg: null
  class_name: MLPModel
"""


def test_an_isaac_lab_agent_yaml_with_missing_fields_reads_them_as_unset(tmp_path):
    """``obs_groups: {}`` is rsl_rl 3.x's fallback to the "policy" group. A policy flag dumped as
    ``actor_obs_normalization: {}`` reached rsl_rl 3.x as ``{}`` (not None), so the runner's
    ``empirical_normalization`` did not apply and the actor has no normalizer; Isaac Lab's own
    migration instead sets the policy flag and dumps ``empirical_normalization: {}``."""
    checkpoint, config = _mlp_3x(torch.Generator().manual_seed(7))
    (tmp_path / "params").mkdir()
    agent = tmp_path / "params" / "agent.yaml"
    migrated = ISAAC_LAB_3X_AGENT_YAML.replace("empirical_normalization: true", "empirical_normalization: {}")
    agent.write_text(migrated.replace("actor_obs_normalization: {}", "actor_obs_normalization: true"))
    torch.save(checkpoint, tmp_path / "model_100.pt")
    policy, example = from_rsl_rl(tmp_path)
    assert policy.in_keys == ["policy"] and policy.normalize and policy.clip_actions is None
    reference, _ = from_rsl_rl(tmp_path / "model_100.pt", agent=config)
    x = TensorDict({"policy": torch.randn(4, 6)}, batch_size=[4])
    torch.testing.assert_close(policy(x.clone())["action"], reference(x.clone())["action"])
    without = {k: v for k, v in checkpoint["model_state_dict"].items() if "obs_normalizer" not in k}
    torch.save({**checkpoint, "model_state_dict": without}, tmp_path / "model_100.pt")
    for empirical in ("true", "false"):
        text = ISAAC_LAB_3X_AGENT_YAML.replace(
            "empirical_normalization: true", f"empirical_normalization: {empirical}"
        )
        agent.write_text(text)
        assert not from_rsl_rl(tmp_path)[0].normalize


def test_clip_actions_of_the_runner_config_clamps_the_action(tmp_path):
    """Isaac Lab's and mjlab's RslRlVecEnvWrapper clamp the actor's action to
    [-clip_actions, clip_actions]: the policy as trained is the clamped mean."""
    generator = torch.Generator().manual_seed(3)
    actor = _mlp_entries("mlp", generator, [6, 16, 8, ACTIONS])
    actor |= _normalizer_entries("obs_normalizer.", generator, 6)
    actor["distribution.std_param"] = torch.full((ACTIONS,), 0.25)
    checkpoint = {"actor_state_dict": actor, "critic_state_dict": {}, "iter": 5, "infos": None}
    torch.save(checkpoint, tmp_path / "model_5.pt")
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "agent.yaml").write_text(MJLAB_5X_AGENT_YAML)
    policy, example = from_rsl_rl(tmp_path)
    assert policy.in_keys == ["actor"] and policy.clip_actions == 0.5
    assert "actions clipped to +-0.5" in policy.extra_repr()
    config = yaml.safe_load(MJLAB_5X_AGENT_YAML.replace("!!python/tuple", ""))
    unclipped, _ = from_rsl_rl(tmp_path / "model_5.pt", agent={**config, "clip_actions": None})
    x = TensorDict({"actor": torch.randn(64, 6) * 4}, batch_size=[64])
    raw = unclipped(x.clone())["action"]
    assert raw.abs().max() > 0.5
    torch.testing.assert_close(policy(x.clone())["action"], raw.clamp(-0.5, 0.5))
    negative = MJLAB_5X_AGENT_YAML.replace("clip_actions: 0.5", "clip_actions: -1")
    (tmp_path / "params" / "agent.yaml").write_text(negative)
    with pytest.raises(tdaot.InvalidArgumentError, match=r"clip_actions -1: expected a number > 0"):
        from_rsl_rl(tmp_path)


def _refusal(tmp_path, checkpoint, config, match, **kwargs):
    torch.save(checkpoint, tmp_path / "model_1.pt")
    with pytest.raises(tdaot.InvalidArgumentError, match=match):
        from_rsl_rl(tmp_path / "model_1.pt", agent=config, **kwargs)


def _mlp_3x(generator):
    return _old_checkpoint("3.x-mlp", generator)


def test_an_unknown_checkpoint_layout_names_keys_found_and_expected(tmp_path):
    _refusal(
        tmp_path,
        {"state_dict": {}, "epoch": 3},
        {},
        r"top-level keys 'epoch', 'state_dict'; expected 'actor_state_dict' \(rsl_rl 4.x-5.x\) or "
        r"'model_state_dict' \(rsl_rl 2.x-3.x\)",
    )


def test_unknown_actor_keys_are_named(tmp_path):
    checkpoint, config = _mlp_3x(torch.Generator().manual_seed(0))
    checkpoint["model_state_dict"]["actor_cnns.0.weight"] = torch.zeros(2, 2)
    _refusal(
        tmp_path,
        checkpoint,
        config,
        r"keys tdaot does not know for this layout: 'actor_cnns.0.weight'; "
        r"expected actor.N.\*, std or log_std",
    )
    checkpoint, config = _mlp_3x(torch.Generator().manual_seed(0))
    state = checkpoint["model_state_dict"]
    state["actor.1.weight"] = torch.zeros(16, 16)
    _refusal(tmp_path, checkpoint, config, r"actor.1.weight and actor.1.bias must both be present")
    state["actor.1.bias"] = torch.zeros(16)
    _refusal(tmp_path, checkpoint, config, r"Linear layers at actor.0 and actor.1: rsl_rl's MLP")
    del state["actor.1.weight"], state["actor.1.bias"]
    state["actor.2.weight"] = torch.zeros(8, 15)
    _refusal(tmp_path, checkpoint, config, r"actor.2.weight takes 15 features but the layer before gives 16")
    state["actor.2.weight"] = torch.zeros(8, 16)
    state["actor.2.scale"] = torch.zeros(8)
    _refusal(tmp_path, checkpoint, config, r"unexpected key 'actor.2.scale'; an rsl_rl MLP has only")


def test_config_sections_and_classes_are_checked(tmp_path):
    generator = torch.Generator().manual_seed(0)
    checkpoint, config = _mlp_3x(generator)
    _refusal(
        tmp_path,
        checkpoint,
        {"actor": {}},
        r"no 'policy' section for an rsl_rl 2.x-3.x checkpoint "
        r"\(its top-level keys: 'actor'\); expected 'policy' with class_name one of ActorCritic",
    )
    student = {**config, "policy": {**config["policy"], "class_name": "StudentTeacher"}}
    _refusal(
        tmp_path, checkpoint, student, r"policy.class_name 'StudentTeacher' is not a model tdaot rebuilds"
    )
    recurrent = {**config, "policy": {**config["policy"], "class_name": "ActorCriticRecurrent"}}
    _refusal(
        tmp_path, checkpoint, recurrent, r"'ActorCriticRecurrent' but model_state_dict has no memory_a.rnn"
    )
    relu6 = {**config, "policy": {**config["policy"], "activation": "relu6"}}
    _refusal(
        tmp_path, checkpoint, relu6, r"policy.activation 'relu6' is not one of rsl_rl's activations: elu"
    )
    no_norm = {**config, "policy": {**config["policy"], "actor_obs_normalization": False}}
    _refusal(
        tmp_path,
        checkpoint,
        no_norm,
        r"actor_obs_normalization is False but the checkpoint has "
        r"actor_obs_normalizer",
    )
    emp = {**config, "empirical_normalization": True, "policy": {**config["policy"]}}
    del emp["policy"]["actor_obs_normalization"]
    state = checkpoint["model_state_dict"]
    no_norm_checkpoint = {
        **checkpoint,
        "model_state_dict": {k: v for k, v in state.items() if "_obs_norm" not in k},
    }
    _refusal(
        tmp_path, no_norm_checkpoint, emp, r"empirical_normalization is true but the checkpoint has neither"
    )
    groups = {**config, "obs_groups": {"policy": []}}
    _refusal(tmp_path, checkpoint, groups, r"obs_groups\['policy'\] = \[\]: expected a non-empty list")


def test_new_layout_refusals_name_what_they_found(tmp_path, runs):
    run, cfg = runs["gru_norm"]
    checkpoint = torch.load(run / f"model_{NEWEST}.pt", weights_only=True)
    lstm_cfg = {**cfg, "actor": {**cfg["actor"], "rnn_type": "lstm"}}
    _refusal(
        tmp_path,
        checkpoint,
        lstm_cfg,
        r"actor.rnn_type is 'lstm' but the checkpoint's recurrent layer has 'gru'",
    )
    no_set = {**cfg, "obs_groups": {"critic": ["policy"]}}
    _refusal(tmp_path, checkpoint, no_set, r"obs_groups has no 'actor' set \(found: 'critic'\)")
    cnn = {**cfg, "actor": {**cfg["actor"], "class_name": "CNNModel"}}
    _refusal(
        tmp_path,
        checkpoint,
        cnn,
        r"actor.class_name 'CNNModel' is not a model tdaot rebuilds; expected one "
        r"of MLPModel, RNNModel",
    )
    beta_odd = {**cfg, "actor": {**cfg["actor"], "distribution_cfg": {"class_name": "BetaDistribution"}}}
    _refusal(tmp_path, checkpoint, beta_odd, r"last layer has 3 outputs, an odd number")
    bad_range = {**cfg, "actor": {**cfg["actor"], "distribution_cfg": {"class_name": "BetaDistribution",
                                                                       "action_range": [1.0]}}}  # fmt: skip
    _refusal(
        tmp_path, checkpoint, bad_range, r"distribution_cfg.action_range \[1.0\]: expected \[low, high\]"
    )
    unknown = {**cfg, "actor": {**cfg["actor"], "distribution_cfg": {"class_name": "Categorical"}}}
    _refusal(
        tmp_path, checkpoint, unknown, r"distribution_cfg.class_name 'Categorical' is not a distribution"
    )
    two_groups = {**cfg, "obs_groups": {"actor": ["policy", "privileged"]}}
    _refusal(
        tmp_path, checkpoint, two_groups, r"groups policy, privileged \(5 features in all\).*give obs_dims"
    )
    _refusal(
        tmp_path,
        checkpoint,
        two_groups,
        r"obs_dims \{'policy': 2, 'privileged': 2\} sum to 4 but the actor "
        r"takes 5",
        obs_dims={"policy": 2, "privileged": 2},
    )
    split, _ = from_rsl_rl(tmp_path / "model_1.pt", agent=two_groups, obs_dims={"policy": 2, "privileged": 3})
    assert split.in_keys[:2] == ["policy", "privileged"]
    broken = copy.deepcopy(checkpoint)
    broken["actor_state_dict"]["rnn.rnn.weight_hh_l0"] = torch.zeros(24, 5)
    _refusal(tmp_path, broken, cfg, r"rnn.rnn.weight_ih_l0 \[24, 5\] is neither a GRU's \[3 \* 5, n\]")


def test_beta_and_state_dependent_heads_take_the_mean(tmp_path, runs):
    run, cfg = runs["mlp"]
    checkpoint = torch.load(run / f"model_{NEWEST}.pt", weights_only=True)
    state = checkpoint["actor_state_dict"]
    weight, bias = state["mlp.4.weight"], state["mlp.4.bias"]
    state["mlp.4.weight"], state["mlp.4.bias"] = torch.cat([weight, -weight]), torch.cat([bias, -bias])
    del state["distribution.std_param"]
    beta = {
        **cfg,
        "actor": {
            **cfg["actor"],
            "distribution_cfg": {"class_name": "BetaDistribution", "action_range": [-2.0, 0.5]},
        },
    }
    hetero = {
        **cfg,
        "actor": {**cfg["actor"], "distribution_cfg": {"class_name": "HeteroscedasticGaussianDistribution"}},
    }
    torch.save(checkpoint, tmp_path / "model_1.pt")
    x = TensorDict({"policy": torch.randn(4, POLICY_OBS)}, batch_size=[4])
    plain, _ = from_rsl_rl(run)
    raw = plain(x.clone())["action"]
    beta_policy, _ = from_rsl_rl(tmp_path / "model_1.pt", agent=beta)
    alpha, b = torch.nn.functional.softplus(raw) + 1, torch.nn.functional.softplus(-raw) + 1
    torch.testing.assert_close(beta_policy(x.clone())["action"], alpha / (alpha + b) * 2.5 - 2.0)
    hetero_policy, _ = from_rsl_rl(tmp_path / "model_1.pt", agent=hetero)
    torch.testing.assert_close(hetero_policy(x.clone())["action"], raw)


def test_run_directory_mistakes_are_named(tmp_path, runs):
    run, _ = runs["mlp"]
    with pytest.raises(tdaot.InvalidArgumentError, match=r"has no model_<iteration>.pt checkpoint"):
        from_rsl_rl(tmp_path)
    with pytest.raises(tdaot.InvalidArgumentError, match=r"has no model_9.pt \(iterations saved: 0, 1\)"):
        from_rsl_rl(run, checkpoint=9)
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"checkpoint 'best.pt' is neither a file nor a file in run"
    ):
        from_rsl_rl(run, checkpoint="best.pt")
    with pytest.raises(tdaot.InvalidArgumentError, match=r"is already a checkpoint file"):
        from_rsl_rl(run / "model_1.pt", checkpoint=1)
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"is neither an rsl_rl run directory nor a checkpoint"
    ):
        from_rsl_rl(tmp_path / "missing")
    (tmp_path / "model_2.pt").write_bytes((run / "model_1.pt").read_bytes())
    with pytest.raises(tdaot.InvalidArgumentError, match=r"has no params/agent.yaml \(the runner config"):
        from_rsl_rl(tmp_path)
    with pytest.raises(tdaot.InvalidArgumentError, match=r"has no params/agent.yaml beside it; give agent="):
        from_rsl_rl(tmp_path / "model_2.pt")
    (tmp_path / "model_3.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"cannot read checkpoint '.*model_3.pt' as tensors only"
    ):
        from_rsl_rl(tmp_path / "model_3.pt", agent={})


def test_a_checkpoint_with_code_in_it_is_not_run(tmp_path, runs):
    run, cfg = runs["mlp"]
    checkpoint = torch.load(run / f"model_{NEWEST}.pt", weights_only=True)
    checkpoint["infos"] = _Unpicklable()
    torch.save(checkpoint, tmp_path / "model_1.pt")
    with pytest.raises(tdaot.InvalidArgumentError, match=r"as tensors only \(torch.load weights_only=True\)"):
        from_rsl_rl(tmp_path / "model_1.pt", agent=cfg)
    assert not _Unpicklable.ran


class _Unpicklable:
    ran = False

    def __reduce__(self):
        return (_Unpicklable._run, ())

    @staticmethod
    def _run():
        _Unpicklable.ran = True


# --- one package: `tdaot build --rsl-rl` ----------------------------------------------------


@pytest.fixture(scope="module")
def cli_built(runs, tmp_path_factory):
    run, _ = runs["gru_norm"]
    out = tmp_path_factory.mktemp("rsl_rl_cli") / "gru.pt2"
    code = main(["build", "--rsl-rl", str(run), "--checkpoint", "0", "-o", str(out), "--json"])
    assert code == 0
    return run, out


def test_the_command_line_builds_a_run_with_a_batch_1_lite_model(cli_built, runs):
    run, out = cli_built
    manifest = tdaot.read_manifest(out)
    assert [spec.key for spec in manifest.inputs] == ["policy", "recurrent_state", "is_init"]
    assert manifest.recurrent is not None and manifest.contract is None
    bound = [m for m in manifest.models if m.batch.min == m.batch.max == 1]
    assert bound and bound[0].lite is not None and bound[0].lite.runs, manifest.models
    policy, example = from_rsl_rl(run, checkpoint=0)
    report = tdaot.testing.assert_parity(policy, str(out), example)
    assert max(row.max_abs for row in report.rows) <= TOL
    # Stepped natively over a rollout with resets, against rsl_rl's own actor.
    native = tdaot.load(str(out))
    session = native.session(batch=ENVS)
    reference = _rsl_rl_actor(run, runs["gru_norm"][1], 0)
    generator = torch.Generator().manual_seed(5)
    worst = 0.0
    for _ in range(6):
        obs = torch.randn(ENVS, POLICY_OBS, generator=generator) * 3
        got = session.step({"policy": obs})["action"]
        expected = reference(TensorDict({"policy": obs}, batch_size=[ENVS]))
        worst = max(worst, (got - expected).abs().max().item())
        dones = torch.rand(ENVS, generator=generator) < 0.3
        reference.reset(dones.long())
        session.reset(dones)
    assert worst <= TOL, worst


def test_the_command_line_says_when_a_run_has_no_deployment_file(runs, tmp_path, capsys, monkeypatch):
    built = {}

    def fake_build(module, example, path, **options):
        built.update(module=module, options=options)
        raise tdaot.BuildError("stopped before compiling")

    monkeypatch.setattr("tdaot.cli.build", fake_build)
    run, _ = runs["mlp"]
    assert main(["build", "--rsl-rl", str(run), "-o", str(tmp_path / "x.pt2")]) == 1
    err = capsys.readouterr().err
    assert f"no deployment file (no params/deploy.yaml in '{run}'): built without a contract" in err
    assert built["options"]["contract"] is None and isinstance(built["module"], RslRlPolicy)


def test_the_deployment_file_becomes_the_contract(runs, tmp_path, capsys, monkeypatch):
    """Contract.from_deploy (branch deploy) is called with the run's params/deploy.yaml or --deploy,
    and the joint order; its contract goes into the build's options."""
    calls = []
    contract = tdaot.Contract(control_dt=0.02)

    def from_deploy(path, *, joint_names=None, mjcf=None, input_key="policy", supervisor=True):
        calls.append((str(path), joint_names, mjcf))
        assert input_key == "policy"  # the actor's observation group
        assert supervisor is True  # a deployment file's default supervisor (--no-supervisor: False)
        return contract

    monkeypatch.setattr(tdaot.Contract, "from_deploy", from_deploy, raising=False)
    built = {}
    monkeypatch.setattr("tdaot.cli.build", lambda m, e, p, **o: (built.update(o), _stop())[1])
    run = tmp_path / "run"
    run.mkdir()
    source, _ = runs["mlp"]
    (run / "params").mkdir()
    (run / "params" / "agent.yaml").write_text((source / "params" / "agent.yaml").read_text())
    (run / "model_1.pt").write_bytes((source / "model_1.pt").read_bytes())
    (run / "params" / "deploy.yaml").write_text("step_dt: 0.02\n")
    out = str(tmp_path / "x.pt2")
    assert main(["build", "--rsl-rl", str(run), "--joint-names", "a, b,c", "-o", out]) == 1
    assert calls[-1] == (str(run / "params" / "deploy.yaml"), ["a", "b", "c"], None)
    assert built["contract"] is contract
    assert f"contract from {run / 'params' / 'deploy.yaml'}" in capsys.readouterr().err
    other = tmp_path / "other.yaml"
    other.write_text("step_dt: 0.02\n")
    assert (
        main(["build", "--rsl-rl", str(run), "--deploy", str(other), "--mjcf", "robot.xml", "-o", out]) == 1
    )
    assert calls[-1] == (str(other), None, "robot.xml")


def _stop():
    raise tdaot.BuildError("stopped before compiling")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--checkpoint", "3", "factory.py:f", "-o", "x.pt2"],
            "--checkpoint belong to --rsl-rl RUN_DIR builds",
        ),
        (
            ["--rsl-rl", "RUN", "factory.py:f", "-o", "x.pt2"],
            "give either a factory or --rsl-rl RUN_DIR, not both",
        ),
        (
            ["--rsl-rl", "RUN", "--config", "c.toml"],
            "give either --rsl-rl RUN_DIR with -o, or --config, not both",
        ),
        (["--rsl-rl", "RUN"], "--rsl-rl RUN_DIR needs -o OUTPUT.pt2"),
        (
            ["--rsl-rl", "RUN", "--deploy", "d.yaml", "--contract", "c.toml", "-o", "x.pt2"],
            "give the contract once: --contract or --deploy, not both",
        ),
    ],
)
def test_command_line_misuse(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text("control_dt = 0.02\n")
    assert main(["build", *argv]) == 2
    assert message in capsys.readouterr().err


def test_mjcf_without_a_deployment_file_is_refused(runs, tmp_path, capsys):
    run, _ = runs["mlp"]
    assert main(["build", "--rsl-rl", str(run), "--mjcf", "robot.xml", "-o", str(tmp_path / "x.pt2")]) == 1
    assert "mjcf maps a deployment file's joints, but run" in capsys.readouterr().err


# --- the CI config ------------------------------------------------------------------------


def test_a_config_entry_names_a_run_directory(runs, tmp_path):
    from tdaot.builder.config import load_config

    run, _ = runs["lstm"]
    config = tmp_path / "tdaot.toml"
    config.write_text(
        f"[[artifact]]\nname = 'walk'\nrsl_rl = '{run}'\ncheckpoint = 1\n"
        "[[artifact]]\nname = 'walk0'\nrsl_rl = 'runs/x'\ncheckpoint = 'model_0.pt'\ndeploy = 'd.yaml'\n"
        "joint_names = ['a', 'b']\n"
        f"[[artifact]]\nname = 'walk1'\nrsl_rl = '{run}'\nmjcf = 'robot.xml'\n"
    )
    walk, walk0, walk1 = load_config(config)
    assert walk.factory is None and walk.rsl_rl.run_dir == str(run) and walk.rsl_rl.checkpoint == 1
    assert walk.rsl_rl.find_deploy and walk.rsl_rl.deploy is None
    assert walk0.rsl_rl.checkpoint == str(tmp_path / "runs" / "x" / "model_0.pt")
    assert walk0.rsl_rl.deploy == str(tmp_path / "d.yaml") and walk0.rsl_rl.joint_names == ("a", "b")
    module, example, options = walk.load()
    assert isinstance(module, RslRlPolicy) and options.contract is None
    assert module.in_keys == ["policy", "recurrent_state_h", "recurrent_state_c", "is_init"]
    assert list(example.keys()) == ["policy", "recurrent_state_h", "recurrent_state_c", "is_init"]
    with pytest.raises(tdaot.InvalidArgumentError, match=r"mjcf maps a deployment file's joints, but run"):
        walk1.load()


def test_a_config_build_job_builds_the_runs_policy_with_its_contract(runs, tmp_path, monkeypatch):
    """build_one (tdaot build --config) takes the policy and the deployment file's contract from
    the run; stopped before the compile."""
    from tdaot.builder import jobs
    from tdaot.builder.config import load_config

    contract = tdaot.Contract(control_dt=0.02)
    monkeypatch.setattr(tdaot.Contract, "from_deploy", lambda path, **kw: contract, raising=False)
    seen = {}

    def fake_build(module, example, output, options, **kwargs):
        seen.update(module=module, example=example, options=options, factory=kwargs["factory"])
        raise tdaot.BuildError("stopped before compiling")

    monkeypatch.setattr(jobs, "build", fake_build)
    run, _ = runs["gru_norm"]
    (tmp_path / "deploy.yaml").write_text("step_dt: 0.02\n")
    config = tmp_path / "tdaot.toml"
    config.write_text(f"[[artifact]]\nname = 'walk'\nrsl_rl = '{run}'\ndeploy = 'deploy.yaml'\n")
    (spec,) = load_config(config)
    result = jobs.build_one(spec, lambda *event: None, use_cache=False)
    assert result.failed and result.error == "BuildError: stopped before compiling"
    assert isinstance(seen["module"], RslRlPolicy) and seen["factory"] is None
    assert seen["options"].contract is contract and seen["example"].batch_size == torch.Size([1])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("rsl_rl = 'r'\nfactory = 'p.py:f'", r"field 'rsl_rl': give either factory or rsl_rl"),
        ("factory = 'p.py:f'\ncheckpoint = 3", r"field 'checkpoint': applies to rsl_rl entries only"),
        (
            "rsl_rl = 'r'\ncheckpoint = true",
            r"field 'checkpoint': expected a file name or an iteration number",
        ),
        ("rsl_rl = 'r'\njoint_names = 'a,b'", r"field 'joint_names': expected a list of joint names"),
        (
            "rsl_rl = 'r'\nmjcf = 'm.xml'\njoint_names = ['a']",
            r"field 'mjcf': give the robot's joint order once",
        ),
        (
            "rsl_rl = 'r'\ndeploy = 'd.yaml'\ncontract = {control_dt = 0.02}",
            r"field 'deploy': give the contract once",
        ),
        ("rsl_rl = 3", r"field 'rsl_rl': expected a path, got 3"),
    ],
)
def test_config_mistakes_name_the_field(tmp_path, entry, message):
    from tdaot.builder.config import load_config

    config = tmp_path / "tdaot.toml"
    config.write_text(f"[[artifact]]\nname = 'a'\n{entry}\n")
    with pytest.raises(tdaot.ConfigError, match=r"artifact #1 \('a'\): " + message):
        load_config(config)


def test_from_run_says_rsl_rl(runs, tmp_path, capsys, monkeypatch):
    run, _ = runs["mlp_norm"]
    policy, _ = tdaot.from_run(run)
    assert policy.trained_with.library == "rsl_rl" and "model_<iteration>.pt" in policy.trained_with.evidence
    single, _ = tdaot.from_run(run / "model_0.pt")
    assert single.trained_with.library == "rsl_rl" and "'actor_state_dict'" in single.trained_with.evidence
    monkeypatch.setattr("tdaot.cli.build", lambda m, e, p, **o: _stop())
    assert main(["build", "--run", str(run), "--checkpoint", "0", "-o", str(tmp_path / "x.pt2")]) == 1
    err = capsys.readouterr().err
    assert "rsl_rl run (2 model_<iteration>.pt); no deployment file" in err
