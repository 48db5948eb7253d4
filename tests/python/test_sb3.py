"""tdaot.from_sb3: Stable-Baselines3 2.x models as they come, VecNormalize beside them.

The models are trained here by SB3's own PPO on gymnasium's Pendulum (a few updates) and saved
by its own ``model.save`` / ``VecNormalize.save`` / CheckpointCallback, under the names the RL
Zoo (``vecnormalize.pkl``) and Isaac Lab (``model_vecnormalize.pkl``) give them. The rebuilt
actor is compared with ``model.predict(vec_normalize.normalize_obs(obs), deterministic=True)``.
The VecNormalize pickle is read without running anything in it. One package is built through
`tdaot build --run`, checked natively and on the lite runtime.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import CheckpointCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize
from tensordict import TensorDict

import tdaot
from tdaot.cli import main
from tdaot.trained.sb3 import from_sb3

OBS, ACTIONS, STEPS = 3, 1, 64
TOL = 1e-5


def _train(folder, *, normalize: bool, sde: bool = False, checkpoints: bool = False, name="vecnormalize.pkl"):
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    if normalize:
        env = VecNormalize(env, clip_obs=5.0)
    kwargs = {"net_arch": [16, 16]}
    if sde:
        kwargs["squash_output"] = True
    else:
        kwargs["activation_fn"] = torch.nn.ELU
    model = PPO(
        "MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=2, use_sde=sde, policy_kwargs=kwargs, seed=0
    )
    callback = None
    if checkpoints:
        callback = CheckpointCallback(32, str(folder), name_prefix="model", save_vecnormalize=True)
    model.learn(STEPS, callback=callback)
    folder.mkdir(exist_ok=True)
    if not checkpoints:
        model.save(folder / "model")
        if normalize:
            env.save(str(folder / name))
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sb3")
    return {
        "zoo": _train(root / "zoo", normalize=True),  # model.zip + vecnormalize.pkl
        "isaac_sde": _train(root / "isaac_sde", normalize=True, sde=True, name="model_vecnormalize.pkl"),
        "plain": _train(root / "plain", normalize=False),
        "callback": _train(root / "callback", normalize=True, checkpoints=True),
    }


def _reference(model_path, vecnormalize_path):
    model = PPO.load(str(model_path), device="cpu")
    normalizer = None
    if vecnormalize_path is not None:
        with open(vecnormalize_path, "rb") as file:  # what VecNormalize.load does, without a venv
            normalizer = pickle.load(file)

    def predict(obs: np.ndarray) -> np.ndarray:
        if normalizer is not None:
            obs = normalizer.normalize_obs(obs)
        return model.predict(obs, deterministic=True)[0]

    return predict


def _compare(policy, predict, steps: int = 5) -> float:
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(steps):
        obs = (rng.standard_normal((6, OBS)) * 4).astype(np.float32)
        with torch.no_grad():
            got = policy(TensorDict({"observation": torch.from_numpy(obs)}, batch_size=[6]))["action"].numpy()
        worst = max(worst, float(np.abs(got - predict(obs)).max()))
    return worst


@pytest.mark.parametrize(
    ("name", "model", "vecnormalize"),
    [
        ("zoo", "model.zip", "vecnormalize.pkl"),
        ("isaac_sde", "model.zip", "model_vecnormalize.pkl"),
        ("plain", "model.zip", None),
        ("callback", f"model_{STEPS}_steps.zip", f"model_vecnormalize_{STEPS}_steps.pkl"),
    ],
)
def test_actions_match_sb3_predict(runs, name, model, vecnormalize):
    run = runs[name]
    policy, example = tdaot.from_sb3(run)
    assert policy.source == str(run / model)
    assert policy.vecnormalize == (str(run / vecnormalize) if vecnormalize else None)
    assert policy.normalize == (vecnormalize is not None)
    assert example["observation"].shape == (1, OBS)
    assert _compare(policy, _reference(run / model, run / vecnormalize if vecnormalize else None)) <= TOL


def test_vecnormalize_given_or_refused(runs, tmp_path):
    run = runs["zoo"]
    bare, _ = from_sb3(run / "model.zip", vecnormalize=False)
    assert not bare.normalize and bare.vecnormalize is None
    assert _compare(bare, _reference(run / "model.zip", None)) <= TOL
    given, _ = from_sb3(
        run / "model.zip", vecnormalize=runs["callback"] / f"model_vecnormalize_{STEPS}_steps.pkl"
    )
    assert given.normalize
    with pytest.raises(tdaot.InvalidArgumentError, match=r"vecnormalize='nope.pkl': expected the path"):
        from_sb3(run, vecnormalize="nope.pkl")


def test_a_pickle_is_read_without_running_it(runs, tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (tmp_path / "model.zip").write_bytes((runs["zoo"] / "model.zip").read_bytes())
    (tmp_path / "vecnormalize.pkl").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(tdaot.InvalidArgumentError, match=r"vecnormalize.pkl' is a posix.system, expected a "):
        from_sb3(tmp_path)
    assert not marker.exists()
    with open(runs["zoo"] / "vecnormalize.pkl", "rb") as file:
        normalizer = pickle.load(file)
    normalizer.obs_rms.mean = np.zeros(7)
    normalizer.venv, normalizer.class_attributes, normalizer.returns = (
        None,
        {},
        None,
    )  # as VecNormalize.save has them
    (tmp_path / "vecnormalize.pkl").write_bytes(pickle.dumps(normalizer))
    with pytest.raises(tdaot.InvalidArgumentError, match=r"obs_rms.mean is \[7\], expected \[3\]"):
        from_sb3(tmp_path)
    (tmp_path / "vecnormalize.pkl").write_bytes(b"not a pickle")
    with pytest.raises(tdaot.InvalidArgumentError, match=r"is not a pickle tdaot can read as data"):
        from_sb3(tmp_path)


@pytest.fixture(scope="module")
def recurrent(tmp_path_factory):
    """A RecurrentPPO model (a 2-layer LSTM) and its VecNormalize, saved by sb3-contrib."""
    folder = tmp_path_factory.mktemp("recurrent_ppo")
    env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=2, seed=0), clip_obs=5.0)
    kwargs = {"lstm_hidden_size": 8, "n_lstm_layers": 2, "net_arch": [8]}
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=16, batch_size=16, n_epochs=2, seed=0, policy_kwargs=kwargs
    )
    model.learn(32)
    model.save(folder / "model")
    env.save(str(folder / "vecnormalize.pkl"))
    return folder


def _recurrent_rollout(folder, step, rows: int) -> float:
    """``step(obs, starts) -> actions`` against RecurrentPPO's predict, rows starting episodes at
    random steps; the largest |difference|."""
    reference = RecurrentPPO.load(str(folder / "model.zip"), device="cpu")
    with open(folder / "vecnormalize.pkl", "rb") as file:
        normalizer = pickle.load(file)
    rng = np.random.default_rng(3)
    state, starts, worst = None, np.ones(rows, dtype=bool), 0.0
    for _ in range(8):
        obs = (rng.standard_normal((rows, OBS)) * 3).astype(np.float32)
        expected, state = reference.predict(
            normalizer.normalize_obs(obs), state=state, episode_start=starts, deterministic=True
        )
        worst = max(worst, float(np.abs(step(obs, starts) - expected).max()))
        starts = rng.random(rows) < 0.3
    return worst


def test_recurrent_ppo_matches_predict_over_steps_with_resets(recurrent):
    policy, example = from_sb3(recurrent)
    assert policy.in_keys == ["observation", "recurrent_state_h", "recurrent_state_c", "is_init"]
    assert policy.out_keys == ["action", ("next", "recurrent_state_h"), ("next", "recurrent_state_c")]
    assert example["recurrent_state_h"].shape == (1, 2, 8) and example["is_init"].all()
    rows = 4
    td = policy.example(rows)

    def step(obs, starts):
        td["observation"] = torch.from_numpy(obs)
        td["is_init"] = torch.from_numpy(starts).reshape(rows, 1)
        with torch.no_grad():
            out = policy(td.clone())
        for key in policy.state_keys:
            td[key] = out["next", key]
        return out["action"].numpy()

    assert _recurrent_rollout(recurrent, step, rows) <= TOL


def test_a_recurrent_ppo_package_steps_natively_and_lite(recurrent, tmp_path):
    policy, example = from_sb3(recurrent)
    out = str(tdaot.build(policy, example, str(tmp_path / "lstm.pt2"), batch=1).path)
    session = tdaot.load(out).session(batch=1)

    def step(obs, starts):
        if starts[0]:
            session.reset(torch.ones(1, dtype=torch.bool))
        return session.step({"observation": torch.from_numpy(obs)})["action"].numpy()

    assert _recurrent_rollout(recurrent, step, 1) <= TOL
    tdaot.testing.assert_parity(policy, out, example, runtime="lite", atol=TOL, rtol=0)


def test_recurrent_ppo_keys_are_checked(tmp_path):
    model = RecurrentPPO("MlpLstmPolicy", "Pendulum-v1", n_steps=16, batch_size=16, n_epochs=1, seed=0,
                         policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]})  # fmt: skip
    model.save(tmp_path / "model")
    import io

    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    state = torch.load(io.BytesIO(members["policy.pth"]), weights_only=True)
    del state["lstm_actor.bias_hh_l0"]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    members["policy.pth"] = buffer.getvalue()
    with zipfile.ZipFile(tmp_path / "broken.zip", "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    with pytest.raises(tdaot.InvalidArgumentError, match=r"recurrent layer keys .*'lstm_actor.bias_hh_l0'"):
        from_sb3(tmp_path / "broken.zip")


def test_directory_and_zip_mistakes_are_named(tmp_path, runs):
    with pytest.raises(tdaot.InvalidArgumentError, match=r"is neither a Stable-Baselines3 model zip nor"):
        from_sb3(tmp_path / "missing")
    (tmp_path / "best.zip").write_bytes(b"x")
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"has no model.zip .*zips there: 'best.zip'; name one"
    ):
        from_sb3(tmp_path)
    with pytest.raises(tdaot.InvalidArgumentError, match=r"best.zip' is not a Stable-Baselines3 model zip"):
        from_sb3(tmp_path / "best.zip")
    with zipfile.ZipFile(tmp_path / "model.zip", "w") as archive:
        archive.writestr("data", "{}")
    with pytest.raises(tdaot.InvalidArgumentError, match=r"has no 'policy.pth'"):
        from_sb3(tmp_path / "model.zip")


def _edited_zip(runs, tmp_path, *, data=None, weights=None):
    import json

    with zipfile.ZipFile(runs["plain"] / "model.zip") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    if data is not None:
        loaded = json.loads(members["data"])
        data(loaded)
        members["data"] = json.dumps(loaded).encode()
    if weights is not None:
        import io

        state = torch.load(io.BytesIO(members["policy.pth"]), weights_only=True)
        weights(state)
        buffer = io.BytesIO()
        torch.save(state, buffer)
        members["policy.pth"] = buffer.getvalue()
    path = tmp_path / "edited.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return path


@pytest.mark.parametrize(
    ("data", "weights", "match"),
    [
        (None, lambda s: s.update({"mlp_extractor.policy_net.0.scale": torch.zeros(1)}),
         r"unexpected key 'mlp_extractor.policy_net.0.scale'"),
        (None, lambda s: s.update({"mlp_extractor.policy_net.1.weight": torch.zeros(1)}),
         r"mlp_extractor.policy_net.1.weight and mlp_extractor.policy_net.1.bias must both be present"),
        (None, lambda s: s.update({"actor.mu.weight": torch.zeros(1)}),
         r"keys tdaot does not know: 'actor.mu.weight'; expected mlp_extractor"),
        (None, lambda s: s.pop("action_net.bias"),
         r"action_net.weight and action_net.bias must both be present"),
        (lambda d: d["policy_class"].update({":serialized:": "!!"}), None,
         r"\[':serialized:'\] is not base64"),
        (lambda d: d.update({"policy_class": "SACPolicy"}), None,
         r"data\['policy_class'\] is 'SACPolicy'"),
        (lambda d: d.update({"action_space": d["policy_class"]}), None,
         r"data\['action_space'\] is a stable_baselines3.common.policies.ActorCriticPolicy, expected"),
    ],
)  # fmt: skip
def test_model_refusals_name_the_key(runs, tmp_path, data, weights, match):
    with pytest.raises(tdaot.InvalidArgumentError, match=match):
        from_sb3(_edited_zip(runs, tmp_path, data=data, weights=weights), vecnormalize=False)


def test_sb3_is_not_needed(runs):
    script = textwrap.dedent(
        f"""
        import sys
        for name in ("stable_baselines3", "sb3_contrib", "gymnasium"):
            sys.modules[name] = None  # any import of them now raises ImportError
        import tdaot
        policy, example = tdaot.from_sb3({str(runs["zoo"])!r})
        print(policy(example)["action"].shape)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"torch.Size([1, {ACTIONS}])"


# --- one package: `tdaot build --run`, batch 1 (one compile: the model the lite runtime runs) --
@pytest.fixture(scope="module")
def built(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("sb3_cli") / "sb3.pt2"
    assert main(["build", "--run", str(runs["isaac_sde"]), "--batch", "1", "-o", str(out)]) == 0
    return out


def test_the_command_line_builds_an_sb3_model(built, runs):
    run = runs["isaac_sde"]
    policy, _ = from_sb3(run)
    predict = _reference(run / "model.zip", run / "model_vecnormalize.pkl")
    native = tdaot.load(str(built))
    rng = np.random.default_rng(4)
    for _ in range(4):
        obs = (rng.standard_normal((1, OBS)) * 4).astype(np.float32)
        example = TensorDict({"observation": torch.from_numpy(obs)}, batch_size=[1])
        tdaot.testing.assert_parity(policy, str(built), example, atol=TOL, rtol=0)
        tdaot.testing.assert_parity(policy, str(built), example, runtime="lite", atol=TOL, rtol=0)
        got = native(example.clone())["action"].numpy()
        assert float(np.abs(got - predict(obs)).max()) <= TOL


def test_from_run_says_sb3(runs):
    policy, _ = tdaot.from_run(runs["zoo"])
    assert policy.trained_with.library == "sb3" and "model.zip" in policy.trained_with.evidence
    single, _ = tdaot.from_run(runs["callback"] / f"model_{STEPS}_steps.zip")
    assert single.trained_with.library == "sb3" and single.normalize
