"""Exceptions raised by tdaot.

Every exception tdaot raises derives from :class:`TdaotError`. The runtime classes mirror
the C++ hierarchy in ``cpp/include/tdaot/errors.h`` one to one; the bindings raise them
from C++ failures, so ``pytest.raises(tdaot.DtypeError, match="observation")`` works for
the native runner. Build-time and command-line errors exist only in Python.

Exit codes of the ``tdaot`` command are decided here, by :func:`exit_code`: 2 for a usage
problem (:class:`UsageError`: a bad command line, config file or factory), 1 for any other
tdaot error.
"""

from __future__ import annotations


class TdaotError(Exception):
    """Base class of every tdaot error.

    The runtime reports a broken invariant of its own (a bug in tdaot, not in the caller's
    package or inputs) with a message starting ``"internal:"``: such an error is made an
    :class:`InternalError`, whichever class the C++ side raised it as.
    """

    #: The ``tdaot`` command's exit status when this error ends it.
    exit_code = 1

    def __new__(cls, *args, **kwargs):
        if cls is TdaotError and args and isinstance(args[0], str) and args[0].startswith(INTERNAL_PREFIX):
            cls = InternalError
        return super().__new__(cls, *args, **kwargs)


# The C++ runtime's prefix for a broken invariant of its own (tdaot::Error("internal: ...")).
INTERNAL_PREFIX = "internal:"


class InternalError(TdaotError):
    """A broken invariant of the runtime itself, not something the caller did: a bug in tdaot
    (please report it with the message). The C++ side throws these as ``tdaot::InternalError``
    or with a message starting ``"internal:"``."""


class TorchMismatchError(TdaotError, ImportError):
    """``tdaot._C`` was built against another torch release than the one installed (raised by
    the first import of ``tdaot._C``; an ImportError too). The message says how to rebuild."""


class FlightLogError(TdaotError):
    """A flight log (``.tdlog``, docs/flight-recorder.md) that cannot be read: not a flight log,
    another format version, shorter than its header says, or a header member or field missing.
    ``path`` is the file ("<flight log bytes>" for bytes)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


# --- loading a package (C++ runtime) -------------------------------------------------
class PackageError(TdaotError):
    """The package is missing, unreadable, not a .pt2 archive, or AOTInductor refused it."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class IntegrityError(PackageError):
    """The package is not the artifact it claims to be: its sha256 differs from the pinned
    ``expected_sha256``, or a file inside it differs from (or is missing from, or is not
    listed in) the sha256 digests its manifest records."""


class SignatureError(IntegrityError):
    """With ``trusted_keys`` set, the package carries no valid signature by one of them
    (unsigned, signed only by other keys, or its manifest changed after signing); or a signing
    or trusted key cannot be used (a missing or garbage file, a private key given as a trusted
    one or the reverse, not Ed25519). The message names the key; ``path`` is the package (or,
    for ``tdaot keygen``, the key file)."""


class ManifestError(PackageError):
    """The package holds no tdaot manifest, or the manifest is malformed."""


class HostMismatchError(PackageError):
    """The package was built for a device, CPU or torch version this host does not have."""


class MissingOperatorError(HostMismatchError):
    """The package calls a custom operator that no loaded library registers; ``op`` names it.
    Pass the operator's shared library: ``tdaot.load(..., op_libraries=[path])``."""

    def __init__(self, message: str, path: str = "", op: str = "") -> None:
        super().__init__(message, path)
        self.op = op


# --- running (C++ runtime input validation) ------------------------------------------
class InputError(TdaotError):
    """An input does not match the manifest; ``key`` names it when one key is at fault."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


class MissingKeyError(InputError):
    """A key the manifest lists as an input was not passed."""


class UnknownKeyError(InputError):
    """A key was passed that the manifest does not list as an input."""


class DtypeError(InputError):
    """An input has another dtype than the manifest's."""


class ShapeError(InputError):
    """An input has another rank or per-sample shape than the manifest's."""


class BatchSizeError(InputError):
    """The batch size is outside the manifest's range or differs between inputs."""


class DeviceError(InputError):
    """An input lives on another device than the package was built for."""


class LayoutError(InputError):
    """An input is not plain dense contiguous memory, which the generated kernels assume: a
    non-contiguous view, a sparse or mkldnn layout, a nested tensor, a tensor subclass, or a
    lazily negated view (``tensor.resolve_neg()``)."""


class ContractError(TdaotError):
    """A deployment contract (:class:`tdaot.Contract`) is malformed or does not fit the policy
    (raised when it is made or built), or a service disagrees with a package's contract
    (``contract.order``); ``key`` names the signal at fault when one is."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


class InvalidArgumentError(TdaotError):
    """A caller's misuse rather than a bad package, input or internal failure: invalid load
    options, a moved-from object, a single-thread object used from two threads at once, an
    option or call that does not apply to this package (``cuda_graph`` on a CPU package,
    ``reset`` of a package that is not recurrent)."""


class BoundKeyError(InvalidArgumentError, KeyError):
    """A binding's or session's tensors (``b.inputs``, ``b.outputs``, ``session.state``) were
    indexed, assigned or deleted with a key they do not hold: the message names the key and the
    keys they hold; ``key`` is the key. A KeyError too, as a mapping's lookup raises."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:  # KeyError's repr-quotes its message
        return str(self.args[0]) if self.args else ""


class ExecutionError(TdaotError):
    """The compiled model failed while running validated inputs."""


class WeightsError(TdaotError):
    """A weight file was refused (by ``tdaot.export_weights`` or ``swap_weights``): unreadable,
    truncated, its digest wrong, made for another package or architecture, or a tensor
    missing, of another shape or dtype, or not finite. ``path`` is the file, ``tensor`` the
    tensor at fault (or ""). A refused swap leaves the live weights serving."""

    def __init__(self, message: str, path: str = "", tensor: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.tensor = tensor


# --- building a package (Python only) ------------------------------------------------
class BuildError(TdaotError):
    """The policy, its example or the build options cannot make an artifact."""


class KeyNameError(BuildError):
    """A tensordict key cannot be represented in the manifest (a part contains '.')."""


class ExportError(BuildError):
    """torch.export could not trace the policy."""


class CompileError(BuildError):
    """AOTInductor could not compile the exported program."""


# --- usage: the command line, config files, factories (exit code 2) ----------------------
class UsageError(TdaotError):
    """The request itself is malformed, before any policy is built: exit code 2."""

    exit_code = 2


class CliError(UsageError):
    """A command-line usage problem, reported as one line on stderr."""


class MissingDependencyError(UsageError, ImportError):
    """A command or option needs an optional Python module that is not installed (checked before
    it does any work); the message names the module and the pip line (tdaot.optional)."""

    def __init__(self, message: str, modules: str = "") -> None:
        super().__init__(message)
        self.modules = modules


class ConfigError(UsageError, BuildError):
    """A build configuration file is unreadable or has a bad entry (naming the artifact and field)."""


class FactoryError(UsageError, BuildError):
    """A factory cannot be found, raises, or returns something else than (module, example)."""


# --- warnings -------------------------------------------------------------------------------
class StaticBatchWarning(UserWarning):
    """The policy specialised the batch dim (or compiles only with a concrete one), so the
    artifact has a static batch."""


class SpecialisationWarning(UserWarning):
    """A batch-specialised model of a ``tuning="auto"`` package could not be built as planned:
    built without the bound run's entry point, or left out (the dynamic model serves its batch)."""


class LiteWarning(UserWarning):
    """A specialised (latency) model of the package does not run on the lite runtime
    (``tdaot::lite``, no libtorch): it needs libtorch. The message names the model and why;
    ``require_lite`` makes this a BuildError."""


class ReproducibilityWarning(UserWarning):
    """The build could not compile in tdaot's private inductor cache path (``/tmp/tdaot-inductor``:
    another user's, or not a private directory), so the package's bytes carry inductor's own cache
    path and differ from a build elsewhere."""


class CompatWarning(UserWarning):
    """The installed torch differs from what one of tdaot's patches of its internals expects (an
    attribute missing, another signature, the text it replaces not found): the package is built
    without that patch, and its manifest does not list it. The message names the patch, the
    torch version and what differs (tdaot.builder.patches lists every patch)."""


class WeightSwapWarning(UserWarning):
    """The build could not compute the package's weights digest (a model it cannot load on this
    host, e.g. one compiled for another architecture): the package records none and cannot swap
    weights. The message names the package and why."""


def exit_code(error: BaseException) -> int:
    """The ``tdaot`` command's exit status for ``error``: 2 for usage errors, 1 otherwise."""
    return error.exit_code if isinstance(error, TdaotError) else 1


__all__ = [
    "BatchSizeError",
    "BoundKeyError",
    "BuildError",
    "CliError",
    "CompatWarning",
    "CompileError",
    "ConfigError",
    "ContractError",
    "DeviceError",
    "DtypeError",
    "ExecutionError",
    "ExportError",
    "FactoryError",
    "FlightLogError",
    "HostMismatchError",
    "InputError",
    "InternalError",
    "InvalidArgumentError",
    "KeyNameError",
    "LayoutError",
    "LiteWarning",
    "ReproducibilityWarning",
    "IntegrityError",
    "ManifestError",
    "MissingKeyError",
    "MissingOperatorError",
    "PackageError",
    "ShapeError",
    "SignatureError",
    "SpecialisationWarning",
    "StaticBatchWarning",
    "TdaotError",
    "MissingDependencyError",
    "TorchMismatchError",
    "UnknownKeyError",
    "UsageError",
    "WeightSwapWarning",
    "WeightsError",
]
