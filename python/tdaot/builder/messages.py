"""The messages of a failed export: torch's first lines, the user's line that led to the
error, and a hint that says what to change."""

from __future__ import annotations

import os
import traceback

from tensordict.nn import TensorDictModuleBase, TensorDictParams
from torch import nn

from tdaot import _torch_compat
from tdaot import keys as keyutil

# How much of a torch.export error to quote; the rest is a long internal traceback.
ERROR_LINES = 12
# The package's root: frames inside tdaot are never the user's.
_TDAOT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_class_name(module: nn.Module) -> str:
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


def describe_module(module: nn.Module) -> str:
    """The class name, plus the wrapped module's for a TensorDictModule, for messages."""
    inner = getattr(module, "module", None)
    # TensorDictSequential keeps its children in a ModuleList: not worth naming.
    if isinstance(inner, nn.Module) and not isinstance(inner, (TensorDictModuleBase, nn.ModuleList)):
        return f"{module_class_name(module)} wrapping {module_class_name(inner)}"
    return module_class_name(module)


def first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def export_message(name: str, module: nn.Module, in_keys, out_keys, err: BaseException) -> str:
    """The export error's first lines, the user's line that raised it, and a hint."""
    lines = [line for line in str(err).splitlines() if line.strip() and not _torch_compat.is_advice(line)]
    quoted = lines[:ERROR_LINES] or [type(err).__name__]
    marker = _torch_compat.raising_call_index(lines)
    if marker is not None and marker >= ERROR_LINES:
        quoted += ["...", *lines[marker : marker + 3]]
    keys = ", ".join(keyutil.to_manifest(k) for k in in_keys)
    outs = ", ".join(keyutil.to_manifest(k) for k in out_keys)
    message = (
        f"torch.export failed for {name} (in keys: {keys}; out keys: {outs}):\n    {type(err).__name__}: "
    )
    message += "\n    ".join(quoted)
    frame = user_frame(err)
    if frame and frame not in message:
        message += f"\n    in your code: {frame}"
    if _torch_compat.is_data_dependent(err):
        library = _library_frame(lines)
        if library:
            message += (
                f"\nHint: the branch on a tensor's value is inside an installed library ({library}), "
                "not in your code. If it tests a module's buffer that only configures it (a flag), "
                "replace the buffer by a plain Python value before building; otherwise pick an option "
                "or module that avoids the branch."
            )
        else:
            message += (
                "\nHint: the policy branches on a tensor's value (a Python `if` on a tensor, or "
                ".item()). Write the branch with torch.cond(pred, true_fn, false_fn, operands), or "
                "compute both sides and pick with torch.where."
            )
    elif _torch_compat.is_locked_parameter(err) and _holds_tensordict_params(module):
        message += (
            "\nHint: torch.export swaps every parameter for a traced stand-in by its dotted name, "
            "which a TensorDictParams refuses (it is locked) when it holds nested parameters "
            "(tensordict 0.14, torch 2.13). Hold them as plain nn.Parameters (torchrl's multi-agent "
            "networks are rewritten so by tdaot itself: README, export-time rewrites)."
        )
    return message


def user_frame(err: BaseException) -> str:
    """ "file:line: code" of the innermost traceback frame outside installed packages and
    tdaot itself: the user's line that led to the error (non-strict export runs it as Python)."""
    found = ""
    for frame in traceback.extract_tb(err.__traceback__):
        path = os.path.abspath(frame.filename)
        if "site-packages" in path or path.startswith(_TDAOT_ROOT) or frame.filename.startswith("<"):
            continue
        found = f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return found


def _holds_tensordict_params(module: nn.Module) -> bool:
    return any(isinstance(sub, TensorDictParams) for sub in module.modules())


def _library_frame(lines: list[str]) -> str:
    """ "package/module.py:line" when the quoted failing frame is in an installed package."""
    frame = _torch_compat.raising_frame(lines)
    if frame is None:
        return ""
    path, line = frame
    parts = path.replace(os.sep, "/").split("/")
    for root in ("site-packages", "dist-packages"):
        if root in parts:
            return "/".join(parts[parts.index(root) + 1 :]) + f":{line}"
    return ""
