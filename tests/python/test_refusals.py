"""A specialised model's bound attempt that AOTInductor refuses is compiled once: the refusal is
remembered under the model's cache key, on disk in the cache and for the life of the process,
and one of a policy with custom operators is known before compiling (tdaot.builder.cache).

A small policy sampling a Categorical at random (multinomial: its batch-1 model needs the proxy
executor): 3 compiles, then two builds that compile nothing, each warning and sealing as the first.
"""

from __future__ import annotations

import shutil
import warnings
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import ProbabilisticTensorDictModule, TensorDictModule, TensorDictSequential
from torch import nn
from torch.distributions import Categorical

import tdaot
from tdaot.builder import cache as cache_module
from tdaot.builder.cache import ArtifactCache, remember_refusal, remembered_refusal
from tdaot.builder.compile import known_refusal
from tdaot.builder.tuning import ModelPlan

OPTIONS = {"interaction_type": "random", "batch": (1, 8), "factory": "test_refusals.py:categorical_policy"}


def categorical_policy():
    torch.manual_seed(0)
    logits = TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["logits"])
    head = ProbabilisticTensorDictModule(
        in_keys=["logits"], out_keys=["action"], distribution_class=Categorical
    )
    return TensorDictSequential(logits, head), TensorDict({"observation": torch.randn(4, 3)}, batch_size=[4])


def _build(path, cache):
    """(artifact, statuses, SpecialisationWarning messages) of one build."""
    policy, example = categorical_policy()
    statuses: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        artifact = tdaot.build(policy, example, path, cache=cache, on_status=statuses.append, **OPTIONS)
    specialisation = [str(w.message) for w in caught if issubclass(w.category, tdaot.SpecialisationWarning)]
    return artifact, statuses, specialisation


def test_a_refused_bound_model_is_compiled_once_cached_or_not(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module, "_refused", {})  # as in a fresh process
    cache = ArtifactCache(tmp_path / "cache")
    first, statuses, warned = _build(tmp_path / "first.pt2", cache)
    # The dynamic model, the bound attempt at batch 1 (refused), batch 1 without the bound run.
    assert statuses == ["exporting", "compiling", "compiling b1", "compiling b1"]
    assert len(warned) == 1 and "'b1'" in warned[0] and "proxy executor" in warned[0]
    assert [(m.name, m.batch.min) for m in first.manifest.models] == [("model", 1), ("b1", 1)]
    refusals = list((tmp_path / "cache").rglob("*.refused"))
    assert len(refusals) == 1 and "proxy executor" in refusals[0].read_text()

    # Another process with the same cache: the refusal is read from it; nothing compiles.
    monkeypatch.setattr(cache_module, "_refused", {})
    again, statuses, warned_again = _build(tmp_path / "again.pt2", cache)
    assert statuses == ["exporting", "cached"]
    assert warned_again == warned
    assert again.manifest == first.manifest and again.sha256 == first.sha256

    # A cache holding the packages but not the refusal: this process remembers it.
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "cache", other, ignore=shutil.ignore_patterns("*.refused"))
    third, statuses, warned_third = _build(tmp_path / "third.pt2", ArtifactCache(other))
    assert statuses == ["exporting", "cached"]
    assert warned_third == warned and third.sha256 == first.sha256


def test_refusals_are_kept_per_key_in_the_process_and_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module, "_refused", {})
    cache = ArtifactCache(tmp_path)
    assert remembered_refusal(cache, "ab" * 32) is None and remembered_refusal(None, "ab" * 32) is None
    remember_refusal(None, "cd" * 32, "no cache: this process only")
    assert remembered_refusal(None, "cd" * 32) == "no cache: this process only"
    assert cache.refusal("cd" * 32) is None
    remember_refusal(cache, "ef" * 32, "refused for a reason")
    assert cache.refusal("ef" * 32) == "refused for a reason"
    monkeypatch.setattr(cache_module, "_refused", {})
    assert remembered_refusal(cache, "ef" * 32) == "refused for a reason"
    assert remembered_refusal(None, "ef" * 32) == "refused for a reason"  # now known in the process


@pytest.mark.parametrize(
    ("custom_ops", "bound", "refused"),
    [((), True, False), (("ns::op",), False, False), (("ns::op",), True, True)],
)
def test_a_bound_model_with_custom_operators_is_refused_before_compiling(custom_ops, bound, refused):
    manifest = SimpleNamespace(custom_ops=custom_ops, source=SimpleNamespace(module_class="Policy"))
    refusal = known_refusal(manifest, ModelPlan("b1", "latency", 1, bound=bound))
    assert (refusal is not None) == refused
    if refused:
        assert refusal.startswith("Policy (model 'b1', batch 1) calls operators through AOTInductor's proxy")
