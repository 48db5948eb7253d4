"""The module rewrites for torchrl's modules as they come (checked against torchrl 0.14.1).

- ``rnn_single_step``: GRUModule and LSTMModule outside recurrent mode. torchrl flattens the
  batch with ``TensorDict.reshape(-1)``, which reads the batch as a Python int (the artifact
  would take one batch size only), and GRUModule resets the state under ``if is_init.any()``
  (a branch on a tensor's value). The rewrite flattens with tensor reshapes, resets the state
  with an unconditional ``torch.where`` (what the branch computes), and runs torchrl's own
  ``_gru``/``_lstm`` step. Recurrent mode is left to torchrl.
- ``tensordict_params_as_parameters``: MultiAgentMLP/MultiAgentConvNet (any MultiAgentNetBase)
  built with ``use_td_params=True``, torchrl's default. torch.export cannot swap parameters
  held in a locked TensorDictParams; the rewrite holds the same nn.Parameters as
  ``use_td_params=False`` does (in the module's ``_empty_net``).
- ``agent_loop_for_convolutions``: MultiAgentConvNet with ``share_params=False`` runs each
  agent's network under ``torch.vmap``; vmap's rule for a convolution with per-agent weights
  reads the batch as a Python int (torch 2.13). The rewrite runs the agents one after the
  other with the same parameters and stacks their outputs on the agent dim, as vmap does.
- ``observation_norm_flag``: ObservationNorm's ``standard_normal`` is a bool buffer that
  ``if self.standard_normal:`` tests (a branch on a tensor); the rewrite makes it a Python bool.
"""

from __future__ import annotations

import types

import torch
from torch import nn

from tdaot.builder.rewrites.modules import (
    ModuleRewrite,
    check_signature,
    internals_changed,
    is_exactly,
    library_class,
)

_RNN = "torchrl.modules.tensordict_module.rnn"
_MULTIAGENT = "torchrl.modules.models.multiagent"
_NORMALIZATION = "torchrl.envs.transforms"
# The step methods rnn_single_step calls, with their parameters in torchrl 0.14.1.
_STEP_PARAMETERS = {
    "GRUModule": ("_gru", ("self", "input", "batch", "steps", "device", "dtype", "hidden_in")),
    "LSTMModule": (
        "_lstm",
        ("self", "input", "batch", "steps", "device", "dtype", "hidden0_in", "hidden1_in"),
    ),
}
_STEP_TAIL = ("splits", "is_init", "backend")


def _is_rnn(module: nn.Module) -> bool:
    return is_exactly(module, _RNN, *_STEP_PARAMETERS)


def _patch_rnn(module: nn.Module) -> None:
    method, parameters = _STEP_PARAMETERS[type(module).__name__]
    check_signature("rnn_single_step", type(module), method, parameters + _STEP_TAIL)
    if not hasattr(module, "recurrent_mode"):
        raise internals_changed("rnn_single_step", f"{type(module).__name__} has no recurrent_mode")
    module.forward = types.MethodType(_single_step, module)


def _single_step(self, tensordict):
    """torchrl's single-step forward (recurrent_mode False) without the batch as an int or a
    branch on is_init; ``self.in_keys`` is [input, *state, "is_init"], as torchrl builds it."""
    if self.recurrent_mode:
        return type(self).forward(self, tensordict)
    batch = tensordict.batch_size
    value = tensordict.get(self.in_keys[0])
    steps = value.reshape(-1, 1, *value.shape[len(batch) :])  # [N, 1 step, features]
    rows = steps.shape[0]
    # torchrl reads "is_init" by that name, whatever the in keys say.
    is_init = tensordict.get("is_init").reshape(rows, 1)
    states = [tensordict.get(key, None) for key in self.in_keys[1:-1]]
    if all(state is not None for state in states):
        states = [s.reshape(rows, 1, *s.shape[len(batch) :]) for s in states]
        states = [torch.where(_right(is_init, s), torch.zeros_like(s), s) for s in states]
    else:
        states = [None] * len(states)  # torchrl's step starts from zeros
    step = getattr(self, _STEP_PARAMETERS[type(self).__name__][0])
    outputs = step(steps, rows, 1, steps.device, steps.dtype, *states, None, is_init=None, backend="pad")
    for key, output in zip(self.out_keys, outputs):
        tensordict.set(key, output.reshape(*batch, *output.shape[2:]))
    return tensordict


def _right(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` [N, 1] with trailing dims to broadcast against ``like``."""
    return mask.reshape(*mask.shape, *(1,) * (like.dim() - mask.dim()))


def _holds_td_params(module: nn.Module) -> bool:
    base = library_class(_MULTIAGENT, "MultiAgentNetBase")
    return base is not None and isinstance(module, base) and getattr(module, "use_td_params", False)


def _plain_params(module: nn.Module) -> None:
    from tensordict import TensorDict
    from tensordict.nn import TensorDictParams

    params, net = getattr(module, "params", None), getattr(module, "_empty_net", None)
    if not isinstance(params, TensorDictParams) or not isinstance(net, nn.Module):
        raise internals_changed(
            "tensordict_params_as_parameters",
            f"{type(module).__name__} has no TensorDictParams 'params' beside an '_empty_net' module",
        )
    # The same nn.Parameter objects in a plain TensorDict, placed in the network as
    # MultiAgentNetBase.__init__ does for use_td_params=False.
    plain = TensorDict(dict(params.items(True, True)), batch_size=params.batch_size)
    del module.params
    module.params = plain
    plain.to_module(net, preserve_module_state=False)
    module.use_td_params = False


def _has_unshared_convolutions(module: nn.Module) -> bool:
    return is_exactly(module, _MULTIAGENT, "MultiAgentConvNet") and not getattr(module, "share_params", True)


def _loop_over_agents(module: nn.Module) -> None:
    base = library_class(_MULTIAGENT, "MultiAgentNetBase")
    check_signature(
        "agent_loop_for_convolutions",
        base,
        "vmap_func_module",
        ("module", "in_dims", "out_dims", "randomness", "chunk_size"),
    )
    # forward calls self.vmap_func_module(net, in_dims=(0, input_dim), out_dims=(agent_dim,), ...)
    module.vmap_func_module = _agent_loop


def _agent_loop(net, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """A stand-in for torch.vmap over the agents: (params, inputs) -> stacked outputs."""
    _, input_dim = in_dims
    out_dim = out_dims[0] if isinstance(out_dims, tuple) else out_dims

    def run(params, inputs):
        outputs = []
        for agent in range(params.batch_size[0]):
            agent_inputs = inputs if input_dim is None else inputs.select(input_dim, agent)
            weights = params[agent].flatten_keys(".").to_dict()
            outputs.append(torch.func.functional_call(net, weights, (agent_inputs,)))
        return torch.stack(outputs, out_dim)

    return run


def _has_flag_buffer(module: nn.Module) -> bool:
    return is_exactly(module, _NORMALIZATION, "ObservationNorm") and "standard_normal" in _own_buffers(module)


def _own_buffers(module: nn.Module) -> dict:
    return dict(module.named_buffers(recurse=False))


def _flag_as_bool(module: nn.Module) -> None:
    flag = _own_buffers(module)["standard_normal"]
    if flag.numel() != 1:
        raise internals_changed("observation_norm_flag", f"ObservationNorm.standard_normal is {flag!r}")
    del module.standard_normal
    module.standard_normal = bool(flag)


REWRITES = (
    ModuleRewrite(
        name="rnn_single_step",
        applies_to="torchrl GRUModule, LSTMModule (single step: recurrent_mode False)",
        changes="batch flattened by tensor reshapes, not TensorDict.reshape(-1); is_init.any() branch "
        "as torch.where; torchrl's own _gru/_lstm step",
        matches=_is_rnn,
        apply=_patch_rnn,
    ),
    ModuleRewrite(
        name="tensordict_params_as_parameters",
        applies_to="torchrl MultiAgentNetBase (MultiAgentMLP, MultiAgentConvNet) with use_td_params=True",
        changes="parameters held as with use_td_params=False: the same nn.Parameters in _empty_net",
        matches=_holds_td_params,
        apply=_plain_params,
    ),
    ModuleRewrite(
        name="agent_loop_for_convolutions",
        applies_to="torchrl MultiAgentConvNet with share_params=False",
        changes="torch.vmap over the agents' networks as a loop over the agents, outputs stacked",
        matches=_has_unshared_convolutions,
        apply=_loop_over_agents,
    ),
    ModuleRewrite(
        name="observation_norm_flag",
        applies_to="torchrl ObservationNorm",
        changes="the standard_normal bool buffer as a Python bool",
        matches=_has_flag_buffer,
        apply=_flag_as_bool,
    ),
)
