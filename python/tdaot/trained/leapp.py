"""``tdaot.from_leapp``: an NVIDIA LEAPP bundle (``leapp`` 0.7) as a tensordict policy and contract.

LEAPP traces a policy pipeline into one model file per node plus one YAML: ``models.<node>``
(``inputs`` / ``outputs``, each ``name``, ``dtype``, ``shape``, and the semantic ``kind`` and
``element_names``; ``parameters.backend``, ``model_path``, ``sha256sum``) and ``pipeline``
(``inputs``, ``outputs``, ``data_flow`` between nodes, ``feedback_flow`` from an output back to
an input at the next step with its ``initial_values``, ``configs.frequency`` in Hz).

tdaot carries one node whose backend is ``pt2`` (a ``torch.export`` ExportedProgram): the file is
checked against ``sha256sum``, its program called by :class:`LeappPolicy` with the node's inputs
in the YAML's order, and built as tdaot builds any policy. The YAML becomes the contract
(:func:`leapp_contract`): ``frequency`` the control step, each input's and output's element
names its signal's names, a ``target/joint/*`` output's constant ``kp`` / ``kd`` outputs its
stiffness and damping, every kind the metadata entry ``leapp.kind.<key>`` (so ``tdaot inspect
--leapp`` writes it back, :mod:`tdaot.trained.leapp_out`). A feedback edge is recurrent state:
input ``k`` and output ``("next", k)``, reset to the bundle's initial value where ``is_init``.
Refused by name: several nodes (a data flow), a node without a ``pt2`` model (ONNX or JIT only),
a kind LEAPP does not define, names that do not fit the tensor.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot.contract import Contract, Signal
from tdaot.trained.trainer_files import key_names, refuse

IS_INIT_KEY = "is_init"
KIND_METADATA = "leapp.kind."
# leapp.utils.enums (0.7.2): InputKindEnum and OutputKindEnum's values.
INPUT_KINDS = (
    "state/joint/position", "state/joint/velocity", "state/joint/effort", "state/body/pose",
    "state/body/velocity", "state/body/acceleration", "state/body/linear_acceleration",
    "state/body/linear_velocity", "state/body/angular_acceleration", "state/body/angular_velocity",
    "state/body/rotation", "state/body/position", "state/wrench", "state/vector3d",
    "command/joint/position", "command/joint/velocity", "command/joint/torques", "command/body/rotation",
    "command/body/velocity", "command/body/pose",
)  # fmt: skip
GAIN_KINDS = ("kp", "kd")
OUTPUT_KINDS = (
    *GAIN_KINDS, "target/joint/position", "target/joint/velocity", "target/joint/torques",
    "target/joint/effort", "target/body/position", "target/body/linear_acceleration",
    "target/body/orientation", "target/body/linear_velocity", "target/body/angular_acceleration",
)  # fmt: skip
DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
          "bool": torch.bool, "float16": torch.float16}  # fmt: skip


@dataclass(frozen=True)
class Tensor:
    """One input or output of the node as the YAML describes it."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    kind: str | None
    names: tuple[str, ...] | None  # element_names of the last axis


@dataclass(frozen=True)
class Bundle:
    """What tdaot reads of a LEAPP YAML and the files beside it."""

    path: Path
    node: str
    model: Path
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    feedback: dict[str, str] = field(default_factory=dict)  # output name -> input name
    initial: dict[str, torch.Tensor] = field(default_factory=dict)  # input name -> reset value
    frequency: float | None = None


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        refuse(f"{where} is {value!r}, not a mapping")
    return value


def _tensor(entry: Any, where: str) -> Tensor:
    entry = _mapping(entry, where)
    name, dtype, shape = entry.get("name"), entry.get("dtype"), entry.get("shape")
    if not isinstance(name, str) or not name or "/" in name or name in ("next", IS_INIT_KEY):
        refuse(f"{where}.name is {name!r}: expected a tensor name (not 'next' or 'is_init', without '/')")
    if dtype not in DTYPES:
        refuse(f"{where} ({name}) dtype is {dtype!r}; tdaot reads {', '.join(DTYPES)}")
    if entry.get("type", "tensor") != "tensor":
        refuse(f"{where} ({name}) type is {entry.get('type')!r}; tdaot reads tensors")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape) or len(shape) != 2:
        refuse(f"{where} ({name}) shape is {shape!r}: tdaot carries [batch, n] tensors")
    kind = entry.get("kind")
    if kind is not None and kind not in (*INPUT_KINDS, *OUTPUT_KINDS):
        refuse(
            f"{where} ({name}) kind is {kind!r}: not a kind LEAPP 0.7 defines (InputKindEnum, "
            f"OutputKindEnum), "
            "so no contract signal states it"
        )
    names = entry.get("element_names")
    if names is not None:
        if (
            not isinstance(names, list)
            or len(names) != 1
            or not isinstance(names[0], list)
            or not all(isinstance(n, str) and n for n in names[0])
        ):
            refuse(
                f"{where} ({name}) element_names is {names!r}: tdaot carries one axis of names (the last, "
                "[[a, b, ...]]), not temporal or per-axis names"
            )
        if len(names[0]) != shape[-1] or len(set(names[0])) != len(names[0]):
            refuse(
                f"{where} ({name}) element_names has {len(names[0])} names (distinct?) for {shape[-1]} "
                f"elements"
            )
        names = tuple(names[0])
    return Tensor(name, DTYPES[dtype], tuple(shape), kind, names)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_bundle(source: str | os.PathLike) -> Bundle:
    """The one pt2 node of a LEAPP YAML, its checked model file, feedback and frequency."""
    path = Path(source)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        refuse(f"cannot read LEAPP bundle '{path}': {err.strerror or err}")
    except yaml.YAMLError as err:
        refuse(f"LEAPP bundle '{path}' is not YAML tdaot reads: {err}")
    data = _mapping(data, f"LEAPP bundle '{path}'")
    models = _mapping(data.get("models"), f"'{path}' models")
    pipeline = _mapping(data.get("pipeline", {}), f"'{path}' pipeline")
    if len(models) != 1:
        refuse(
            f"'{path}' is a pipeline of {len(models)} nodes ({key_names(models)}); tdaot carries one node "
            "(a multi-node pipeline's data_flow would run between packages)"
        )
    ((node, model),) = models.items()
    model = _mapping(model, f"'{path}' models.{node}")
    parameters = _mapping(model.get("parameters"), f"'{path}' models.{node}.parameters")
    backend = parameters.get("backend")
    if backend != "pt2":
        refuse(
            f"'{path}' models.{node}.parameters.backend is {backend!r}: tdaot compiles a pt2 node (a "
            "torch.export ExportedProgram); export it with export_with='pt2'"
        )
    if pipeline.get("data_flow"):
        refuse(
            f"'{path}' pipeline.data_flow is {pipeline['data_flow']!r}: tdaot carries one node, no data flow"
        )
    model_path = parameters.get("model_path")
    if not isinstance(model_path, str):
        refuse(f"'{path}' models.{node}.parameters.model_path is {model_path!r}")
    file = path.parent / model_path
    expected = parameters.get("sha256sum")
    if not file.is_file():
        refuse(f"'{path}' models.{node}.parameters.model_path: '{file}' does not exist")
    found = _sha256(file)
    if found != expected:
        refuse(
            f"'{file}' has sha256 {found}, but '{path}' models.{node}.parameters.sha256sum is {expected!r}"
        )
    where = f"'{path}' models.{node}"
    inputs = tuple(_tensor(e, f"{where}.inputs[{i}]") for i, e in enumerate(model.get("inputs") or []))
    outputs = tuple(_tensor(e, f"{where}.outputs[{i}]") for i, e in enumerate(model.get("outputs") or []))
    if not inputs or not outputs:
        refuse(f"{where} has no inputs or no outputs")
    feedback = _feedback(pipeline, node, inputs, outputs, path)
    initial = _initial_values(pipeline, node, feedback, inputs, path)
    frequency = _mapping(pipeline.get("configs") or {}, f"'{path}' pipeline.configs").get("frequency")
    if frequency is not None and (
        isinstance(frequency, bool) or not isinstance(frequency, (int, float)) or frequency <= 0
    ):
        refuse(f"'{path}' pipeline.configs.frequency is {frequency!r}, expected Hz > 0")
    return Bundle(path, node, file, inputs, outputs, feedback, initial, frequency)


def _feedback(pipeline, node: str, inputs, outputs, path) -> dict[str, str]:
    flow = _mapping(pipeline.get("feedback_flow") or {}, f"'{path}' pipeline.feedback_flow")
    pairs = {}
    ins, outs = {t.name: t for t in inputs}, {t.name: t for t in outputs}
    for source, targets in flow.items():
        if not isinstance(targets, list) or len(targets) != 1:
            refuse(
                f"'{path}' pipeline.feedback_flow[{source!r}] is {targets!r}: tdaot carries one input per "
                f"edge"
            )
        src_node, _, src = str(source).partition("/")
        dst_node, _, dst = str(targets[0]).partition("/")
        if src_node != node or dst_node != node or src not in outs or dst not in ins:
            refuse(
                f"'{path}' pipeline.feedback_flow {source!r} -> {targets[0]!r} is not an edge of node "
                f"{node!r}"
            )
        if src != dst or ins[dst].shape != outs[src].shape or ins[dst].dtype != outs[src].dtype:
            refuse(
                f"'{path}' pipeline.feedback_flow {source!r} -> {targets[0]!r}: tdaot carries state as one "
                f"key "
                "in and ('next', key) out, the same name, shape and dtype"
            )
        pairs[src] = dst
    return pairs


def _initial_values(pipeline, node: str, feedback, inputs, path) -> dict[str, torch.Tensor]:
    if not feedback:
        return {}
    shapes = {t.name: t for t in inputs}
    name = pipeline.get("initial_values")
    values: dict[str, torch.Tensor] = {}
    if name is not None:
        from safetensors.torch import load_file  # data only: tensors, no code

        try:
            values = load_file(str(path.parent / str(name)))
        except Exception as err:  # noqa: BLE001 - every unreadable file is reported the same way
            refuse(f"'{path}' pipeline.initial_values '{name}': cannot read it as safetensors: {err}")
    initial = {}
    for key in feedback.values():
        value = values.get(f"{node}/{key}")
        if value is None:
            value = torch.zeros(shapes[key].shape, dtype=shapes[key].dtype)
        if tuple(value.shape) != shapes[key].shape:
            refuse(
                f"'{path}' initial value {node}/{key} is {list(value.shape)}, expected "
                f"{list(shapes[key].shape)}"
            )
        initial[key] = value.to(shapes[key].dtype)
    return initial


class LeappPolicy(TensorDictModuleBase):
    """A LEAPP pt2 node's ExportedProgram as a tensordict policy.

    in_keys  the node's inputs (YAML order), then ``is_init`` when it has feedback
    out_keys its outputs, a feedback output as ``("next", input)``
    """

    def __init__(self, bundle: Bundle, program: torch.nn.Module) -> None:
        super().__init__()
        self.bundle = bundle
        self.bundle_path, self.node = str(bundle.path), bundle.node
        self.program = program
        self.input_names = [t.name for t in bundle.inputs]
        self.output_names = [t.name for t in bundle.outputs]
        self.feedback = dict(bundle.feedback)
        self.state_inputs = set(self.feedback.values())
        for key, value in bundle.initial.items():
            self.register_buffer(f"initial_{key}", value.clone())
        self.shapes = {t.name: (t.shape, t.dtype) for t in bundle.inputs}
        self.in_keys = [*self.input_names, *([IS_INIT_KEY] if self.feedback else [])]
        self.out_keys = [("next", self.feedback[n]) if n in self.feedback else n for n in self.output_names]
        self.train(False)

    def train(self, mode: bool = True) -> LeappPolicy:
        # An ExportedProgram's module has no training mode to switch (torch raises): it is the
        # program as LEAPP traced it, in inference.
        self.training = mode
        return self

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        args = []
        for name in self.input_names:
            value = tensordict.get(name)
            if name in self.state_inputs:
                reset = tensordict.get(IS_INIT_KEY).reshape(-1, 1)
                value = torch.where(reset, getattr(self, f"initial_{name}").expand_as(value), value)
            args.append(value)
        results = self.program(*args)
        if isinstance(results, torch.Tensor):
            results = (results,)
        for key, value in zip(self.out_keys, results):
            tensordict.set(key, value)
        return tensordict

    def example(self) -> TensorDict:
        """Zero inputs of the traced shapes (LEAPP traces batch 1), ``is_init`` true."""
        values = {n: torch.zeros(shape, dtype=dtype) for n, (shape, dtype) in self.shapes.items()}
        batch = next(iter(self.shapes.values()))[0][0]
        if self.feedback:
            values[IS_INIT_KEY] = torch.ones(batch, 1, dtype=torch.bool)
        return TensorDict(values, batch_size=[batch])

    def extra_repr(self) -> str:
        return f"LEAPP node {self.node!r} of {self.bundle_path}" + (
            f", feedback {self.feedback}" if self.feedback else ""
        )


def load_program(bundle: Bundle) -> torch.nn.Module:
    """The node's ExportedProgram as a module (its file already checked against sha256sum)."""
    try:
        program = torch.export.load(str(bundle.model))
    except Exception as err:  # noqa: BLE001 - every unreadable file is reported the same way
        refuse(f"'{bundle.model}' is not a torch.export program: {type(err).__name__}: {err}")
    signature = program.graph_signature
    if len(signature.user_inputs) != len(bundle.inputs) or len(signature.user_outputs) != len(bundle.outputs):
        refuse(
            f"'{bundle.model}' takes {len(signature.user_inputs)} inputs and gives "
            f"{len(signature.user_outputs)} "
            f"outputs, but '{bundle.path}' models.{bundle.node} lists {len(bundle.inputs)} and "
            f"{len(bundle.outputs)}"
        )
    return program.module()


def _gain(
    bundle: Bundle, values: dict[str, torch.Tensor], kind: str, target: Tensor
) -> tuple[float, ...] | None:
    gains = [t for t in bundle.outputs if t.kind == kind]
    if not gains:
        return None
    if len(gains) > 1 or gains[0].names != target.names:
        refuse(
            f"'{bundle.path}' outputs of kind {kind!r} ({', '.join(g.name for g in gains)}): tdaot reads "
            f"one, named "
            f"as the joint target {target.name!r} ({target.names})"
        )
    value = values[gains[0].name]
    if value.shape[0] != 1 and not bool((value == value[:1]).all()):
        refuse(f"'{bundle.path}' output {gains[0].name!r} ({kind}) differs between rows: not a gain")
    return tuple(float(f"{float(v):.7g}") for v in value[0])  # the float32 gains as written


def leapp_contract(
    bundle: Bundle, policy: LeappPolicy, *, control_dt: float | None = None
) -> Contract | None:
    """The contract the bundle's YAML states, or None where it states no kind or names."""
    if not any(t.kind or t.names for t in (*bundle.inputs, *bundle.outputs)):
        return None
    if control_dt is None:
        if bundle.frequency is None:
            refuse(
                f"'{bundle.path}' has kinds and element names but no pipeline.configs.frequency: the "
                f"contract's "
                "control step; give control_dt"
            )
        control_dt = 1.0 / bundle.frequency
    with torch.no_grad():
        example = policy.example()
        values = dict(zip(policy.output_names, policy.program(*(example[n] for n in policy.input_names))))
    metadata, inputs, outputs = {}, {}, {}
    for tensor in bundle.inputs:
        if tensor.name in policy.state_inputs:
            continue
        if tensor.kind is not None and tensor.kind not in INPUT_KINDS:
            refuse(f"'{bundle.path}' input {tensor.name!r} has output kind {tensor.kind!r}")
        if tensor.kind:
            metadata[KIND_METADATA + tensor.name] = tensor.kind
        if tensor.names:
            inputs[tensor.name] = Signal(names=tensor.names)
    targets = [t for t in bundle.outputs if t.kind and t.kind.startswith("target/joint/")]
    for tensor in bundle.outputs:
        if tensor.name in policy.feedback or tensor.kind in GAIN_KINDS:
            continue
        if tensor.kind is not None and tensor.kind not in OUTPUT_KINDS:
            refuse(f"'{bundle.path}' output {tensor.name!r} has input kind {tensor.kind!r}")
        if tensor.kind:
            metadata[KIND_METADATA + tensor.name] = tensor.kind
        if tensor.names:
            gains = {}
            if tensor in targets[:1]:
                gains = {
                    "stiffness": _gain(bundle, values, "kp", tensor),
                    "damping": _gain(bundle, values, "kd", tensor),
                }
            outputs[tensor.name] = Signal(
                names=tensor.names, **{k: v for k, v in gains.items() if v is not None}
            )
    if any(t.kind in GAIN_KINDS for t in bundle.outputs) and not targets:
        refuse(f"'{bundle.path}' has kp/kd outputs but no target/joint/* output whose gains they are")
    metadata["leapp.node"] = bundle.node
    return Contract(control_dt=control_dt, inputs=inputs, outputs=outputs, metadata=metadata)


def from_leapp(source: str | os.PathLike) -> tuple[LeappPolicy, TensorDict]:
    """The pt2 node of a LEAPP bundle (its YAML) as a policy, and its example (batch 1, as LEAPP
    traced it). Its contract: :func:`leapp_contract` (``tdaot build --leapp`` passes it)."""
    bundle = read_bundle(source)
    policy = LeappPolicy(bundle, load_program(bundle))
    return policy, policy.example()
