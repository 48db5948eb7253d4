"""Writes what the weight swap tests compare with, into the build_test_packages fixture's folder
(a ctest fixture of its own; no compile, a few seconds):

- lite_swap_expected.json (tests/cpp/lite/test_lite_weights.cpp): seeded batch-1 inputs of
  tutorial.pt2 and, for each, the outputs of
  the full runtime's bound run after swapping in tutorial_v2.tdw (``"full"``: the same compiled
  model on the same constants, so equal exactly), of the eager tutorial policy given that file's
  weights (``"eager"``, loaded from its ``weights/`` entries), and of the package as built
  (``"built"``, for rollback); ``weights_sha256``: the file's weights digest;
- tutorial_v2_transposed.tdw: tutorial_v2.tdw with the batch-1 model's first weight stored
  transposed (same bytes, a shape the model does not take), its digests rewritten so that it
  passes every check but the shape one (weight_refusals.cpp: both runtimes refuse it);
- tutorial_v2_derived.tdw (issue 56): tutorial_v2.tdw with the same weights/ entries and one
  derived constant of the batch-1 model (one no weights/ entry holds: the lifted-constant check
  cannot compare it) changed by +100, written with tdaot's own writer. It swaps in; the digest
  the policy then reports is not tutorial_v2.tdw's (test_weights.cpp, lite/test_lite_weights.cpp).

Usage: write_swap_fixtures.py PACKAGES_DIR.
"""

import json
import sys
from pathlib import Path

import safetensors.torch
import torch

ROOT = Path(__file__).resolve().parents[2]
TRANSPOSED = "model/b1/module_module_0_module_0_weight"
DERIVED_MODEL = "model/b1/"
STEPS = 3


def flat(tensor: torch.Tensor) -> list:
    return tensor.detach().reshape(-1).tolist()


def main(out: Path) -> int:
    from tdaot.builder.export import export_context
    from tdaot.builder.weights import package_identity
    from tdaot.builder.weights_format import read_metadata, write_weight_file
    from tdaot.runtime import load
    from tdaot.runtime.inputs import as_tensordict, td_keys
    from tdaot.testing import eager_run

    sys.path.insert(0, str(ROOT))
    from examples.policies import tutorial_policy

    package, weights = out / "tutorial.pt2", out / "tutorial_v2.tdw"
    tensors = safetensors.torch.load_file(weights)
    eager, _ = tutorial_policy()
    # The file's weights/ entries are named as torch.export names the wrapped policy ("module.").
    eager.load_state_dict(
        {k.removeprefix("weights/module."): v for k, v in tensors.items() if k.startswith("weights/")}
    )

    built = load(package).bind(1)
    swapped_policy = load(package)
    swapped_policy.swap_weights(weights)
    swapped = swapped_policy.bind(1)
    generator = torch.Generator().manual_seed(25)
    steps = []
    for _ in range(STEPS):
        observation = torch.randn(1, 3, generator=generator)
        record = {"inputs": {"observation": flat(observation)}}
        for name, runner in [("built", built), ("full", swapped)]:
            runner.inputs["observation"].copy_(observation)
            runner.run()
            record[name] = {k: flat(v) for k, v in runner.outputs.items()}
        manifest = swapped_policy.manifest
        td = as_tensordict(td_keys(["observation"]), {"observation": observation})
        with export_context(manifest.interaction_type), torch.no_grad():
            result = eager_run(eager, td, manifest.contract)
        record["eager"] = {s: flat(result.get(k)) for s, k in td_keys(manifest.output_keys)}
        steps.append(record)
    expected = {
        "package": package.name,
        "weights": weights.name,
        "weights_sha256": read_metadata(weights)["tdaot.weights_sha256"],
        "steps": steps,
    }
    (out / "lite_swap_expected.json").write_text(json.dumps(expected))

    plain = {k.removeprefix("weights/"): v for k, v in tensors.items() if k.startswith("weights/")}
    models: dict = {}
    for key, value in tensors.items():
        if key.startswith("model/"):
            _, model, constant = key.split("/", 2)
            value = value.reshape(value.shape[::-1]) if key == TRANSPOSED else value
            models.setdefault(model, {})[constant] = value
    write_weight_file(out / "tutorial_v2_transposed.tdw", plain, models, *package_identity(package))

    key = derived_constant(tensors, DERIVED_MODEL)
    _, model, constant = key.split("/", 2)
    models = {}
    for name, value in tensors.items():
        if name.startswith("model/"):
            _, owner, entry = name.split("/", 2)
            models.setdefault(owner, {})[entry] = value
    models[model][constant] = models[model][constant] + 100
    write_weight_file(out / "tutorial_v2_derived.tdw", plain, models, *package_identity(package))
    return 0


def derived_constant(tensors: dict[str, torch.Tensor], prefix: str) -> str:
    """The first floating constant under ``prefix`` that no weights/ entry holds (a prepacked
    GEMM weight of the latency model): the lifted-constant check has no twin to compare it with."""
    weights = [v for k, v in tensors.items() if k.startswith("weights/")]

    def lifted(value: torch.Tensor) -> bool:
        same = (w for w in weights if w.dtype == value.dtype and w.shape == value.shape)
        return any(torch.equal(w, value) for w in same)

    for key in sorted(tensors):
        value = tensors[key]
        if key.startswith(prefix) and value.is_floating_point() and value.numel() and not lifted(value):
            return key
    raise SystemExit(f"no constant under {prefix!r} is derived from the weights")


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
