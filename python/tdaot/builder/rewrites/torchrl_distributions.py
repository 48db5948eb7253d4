"""The rewrite for torchrl's TanhDelta (DDPG/TD3 actors; checked against torchrl 0.14.1).

``tanh_delta_for_export``: while compiling or exporting, TanhDelta's constructor asserts
``(high > low).all()`` (a branch on a tensor's value: its bounds are tensors) and, with
``safe=True``, its default, raises outright. The rewrite gives the probabilistic module a
TanhDelta subclass that builds the same distribution (the same safe tanh, the same affine map
to the bounds) without those checks; the bounds were checked when the policy ran eagerly.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch import nn

from tdaot.builder.rewrites.modules import ModuleRewrite, check_signature, internals_changed, library_class

_CONTINUOUS = "torchrl.modules.distributions.continuous"
_UTILS = "torchrl.modules.distributions.utils"
_NAME = "tanh_delta_for_export"
# The torchrl 0.14.1 helpers the subclass builds the distribution from.
_HELPERS = {
    _CONTINUOUS: ("SafeTanhTransform", "_PatchedComposeTransform", "_PatchedAffineTransform", "Delta"),
    _UTILS: ("_cast_device", "FasterTransformedDistribution"),
}


def _draws_tanh_delta(module: nn.Module) -> bool:
    probabilistic = library_class("tensordict.nn", "ProbabilisticTensorDictModule")
    tanh_delta = library_class(_CONTINUOUS, "TanhDelta")
    return (
        tanh_delta is not None
        and isinstance(module, probabilistic)
        and getattr(module, "distribution_class", None) is tanh_delta
    )


def _use_export_class(module: nn.Module) -> None:
    module.distribution_class = tanh_delta_for_export()


@functools.cache
def tanh_delta_for_export() -> type:
    """The TanhDelta subclass, made once torchrl is imported (tdaot never imports it itself)."""
    import importlib

    modules = {name: importlib.import_module(name) for name in _HELPERS}
    missing = [f"{m}.{h}" for m, helpers in _HELPERS.items() for h in helpers if not hasattr(modules[m], h)]
    if missing:
        raise internals_changed(_NAME, f"{', '.join(missing)} no longer exist")
    continuous, utils = modules[_CONTINUOUS], modules[_UTILS]
    base = continuous.TanhDelta
    check_signature(
        _NAME, base, "__init__", ("self", "param", "low", "high", "event_dims", "atol", "rtol", "safe")
    )

    class TanhDeltaForExport(base):
        """TanhDelta as torchrl 0.14.1 builds it, less the checks it makes while compiling.
        torchrl always maps to the bounds (its ``non_trivial`` tests the ``is_compiling``
        function, which is truthy), so this does too."""

        def __init__(self, param, low=-1.0, high=1.0, event_dims=1, atol=1e-6, rtol=1e-6, safe=True):
            tanh = continuous.SafeTanhTransform() if safe else torch.distributions.TanhTransform()
            self.non_trivial = True
            self.low = utils._cast_device(low, param.device)
            self.high = utils._cast_device(high, param.device)
            loc = self.update(param)
            affine = continuous._PatchedAffineTransform(
                loc=(self.high + self.low) / 2, scale=(self.high - self.low) / 2
            )
            transform = continuous._PatchedComposeTransform([tanh, affine])
            shape = param.shape
            delta = continuous.Delta(
                loc, atol=atol, rtol=rtol, batch_shape=shape[:-event_dims], event_shape=shape[-event_dims:]
            )
            utils.FasterTransformedDistribution.__init__(self, delta, transform)

    TanhDeltaForExport.__init__.__signature__ = inspect.signature(base.__init__)
    return TanhDeltaForExport


REWRITES = (
    ModuleRewrite(
        name=_NAME,
        applies_to="ProbabilisticTensorDictModule (torchrl ProbabilisticActor) drawing a torchrl TanhDelta",
        changes="TanhDelta built without its compile-time checks ((high > low).all(), the safe=True refusal)",
        matches=_draws_tanh_delta,
        apply=_use_export_class,
    ),
)
