"""tdaot.load: the native runner (tdaot::Policy through pybind11) with a TensorDict face."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot import _C
from tdaot.errors import InvalidArgumentError
from tdaot.manifest import Manifest
from tdaot.runtime.binding import Binding
from tdaot.runtime.inputs import Inputs, as_tensordict, keyed_inputs, naming_given_keys, td_keys
from tdaot.runtime.session import Session

# tdaot::PolicyOptions' fields and defaults, from its C++ definition. Python writes an empty
# C++ string or list as None or (), and intra_op_threads=None leaves torch's setting alone;
# tests/python/test_load_options.py checks tdaot.load and _C.pyi against it.
_DEFAULTS = _C.load_option_defaults()

# Public keys: PEM texts (str or bytes) or paths of PEM files; one key alone is fine too.
TrustedKeys = str | bytes | os.PathLike | Sequence[str | bytes | os.PathLike]


class Policy(TensorDictModuleBase):
    """A loaded package (:func:`tdaot.load` makes it): a tensordict module over the native runner.

    ``in_keys`` and ``out_keys`` are the manifest's inputs and outputs as TensorDict keys
    (nested keys as tuples, a recurrent package's state output as ``("next", k)``).
    ``policy(td)`` reads the in keys from ``td``, writes the out keys into it and returns it, as
    :class:`tensordict.nn.TensorDictModule` does, so a Policy goes inside a
    ``TensorDictSequential`` and stands in for the eager policy in ``env.rollout(n, policy)``:
    a recurrent package takes its state and ``is_init`` from the TensorDict and writes the next
    state to ``("next", k)``, the way torchrl's GRUModule and LSTMModule do (with torchrl's
    InitTracker and the module's TensorDictPrimer on the environment). Batch dims other than one
    (none, as an unbatched environment gives, or several) are flattened into one for the call.
    Called with a mapping or keyword tensors instead, it returns a new TensorDict of the outputs.

    Inputs are validated in C++ against the manifest before the compiled model sees
    them; failures raise subclasses of :class:`tdaot.InputError` naming the key.
    Safe to call from several threads; the GIL is released while the model runs, and
    with ``num_runners=N`` up to N calls run in parallel.
    """

    def __init__(self, loaded: _C.Policy, /, **options) -> None:
        super().__init__()
        if not isinstance(loaded, _C.Policy):
            raise InvalidArgumentError(
                f"tdaot.Policy wraps a loaded package, not {type(loaded).__name__} {loaded!r}: "
                "use tdaot.load(path, ...) to load one"
            )
        if options:
            raise InvalidArgumentError(
                f"load options ({', '.join(options)}) go to tdaot.load, not tdaot.Policy"
            )
        self._policy = loaded
        self.path = self._policy.path
        #: sha256 of the package file as loaded (what ``expected_sha256`` pins).
        self.sha256 = self._policy.sha256
        self.manifest = Manifest.from_json(self._policy.manifest_json, self.path)
        #: The deployment contract the package was built with (tdaot.Contract), or None.
        self.contract = self.manifest.contract
        self._in = td_keys(self.manifest.input_keys)
        self._out = td_keys(self.manifest.output_keys)
        # Per-sample rank of each input and output: what is left of a tensor's dims is its batch.
        self._in_ranks = {spec.key: len(spec.shape) for spec in self.manifest.inputs}
        self.in_keys = [key for _, key in self._in]
        self.out_keys = [key for _, key in self._out]

    def forward(self, tensordict: Inputs | None = None, /, **tensors: torch.Tensor) -> TensorDictBase:
        """Runs the policy. Given a TensorDict: reads the in keys from it (it may hold more),
        writes the out keys into it and returns it. Given a mapping or keyword tensors (manifest
        keys such as ``"agents.observation"`` or tuples), which must match the inputs exactly:
        returns a new TensorDict of the outputs."""
        if not isinstance(tensordict, TensorDictBase):
            with naming_given_keys(self._in, tensordict):
                outputs = self._policy.run(keyed_inputs(self._in, tensordict, tensors))
            return as_tensordict(self._out, outputs)
        with naming_given_keys(self._in, tensordict):
            inputs = keyed_inputs(self._in, tensordict, tensors)
        lead = self._batch_dims(inputs)
        if lead is not None:  # no batch dim, or several: run on one
            rows = math.prod(lead)
            inputs = {name: value.reshape(rows, *value.shape[len(lead) :]) for name, value in inputs.items()}
        with naming_given_keys(self._in, tensordict):
            outputs = self._policy.run(inputs)
        for name, key in self._out:
            value = outputs[name]
            tensordict.set(key, value if lead is None else value.reshape(*lead, *value.shape[1:]))
        return tensordict

    def _batch_dims(self, inputs: dict[str, torch.Tensor]) -> tuple[int, ...] | None:
        """The batch dims every input shares where there are not exactly one (to flatten into
        one), else None: passed as they are, so the runner's validation names any key at fault."""
        if len(inputs) != len(self._in) or any(v.dim() < self._in_ranks[k] for k, v in inputs.items()):
            return None
        leads = {tuple(v.shape[: v.dim() - self._in_ranks[k]]) for k, v in inputs.items()}
        if len(leads) != 1:
            return None
        (lead,) = leads
        return None if len(lead) == 1 else lead

    def run_positional(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The fast path: tensors in manifest input order, outputs in manifest output order."""
        return tuple(self._policy.run_positional(list(tensors)))

    def bind(
        self,
        batch: int = 1,
        *,
        cuda_graph: bool = False,
        envelope: bool = False,
        supervisor: Any = True,
        record: int = 0,
    ) -> Binding:
        """Inputs and outputs preallocated for ``batch`` rows, run in place: the control-loop
        path (allocation-free where the package has a model specialised for ``batch``). For a
        recurrent package, a bound session. Raises :class:`tdaot.BatchSizeError` outside the
        package's batch range. ``cuda_graph`` (CUDA packages): the run is captured as a CUDA
        graph when bound and replayed per call (see :class:`tdaot.Binding`). ``envelope``: the
        safety envelope around every run. ``supervisor``: True (the contract's, when it has
        one), False (none) or a :class:`tdaot.Supervisor` replacing it (checked against the
        contract: :class:`tdaot.ContractError` naming the field). ``record``: the flight
        recorder keeps the last ``record`` runs (0: none; CPU packages), for
        :meth:`tdaot.Binding.dump` (``docs/flight-recorder.md``)."""
        return Binding(
            self._policy,
            self.manifest,
            batch,
            cuda_graph,
            envelope=envelope,
            supervisor=supervisor,
            record=record,
        )

    def session(self, batch: int, *, supervisor: Any = True) -> Session:
        """A session of ``batch`` rows: steps the policy inside the safety envelope (see
        :class:`tdaot.Session`) and, for a recurrent package, carries its state from step to step.
        ``supervisor`` as for :meth:`bind`."""
        return Session(self._policy, self.manifest, batch, supervisor=supervisor)

    def swap_weights(self, path: str | os.PathLike) -> None:
        """Makes the weights of the weight file ``path`` (:func:`tdaot.export_weights`) live,
        between calls: a call in flight finishes on the old weights, every later call (any
        path, bindings and sessions included) runs on the new ones, never a mix. Everything
        is checked first (digests, made for this package, every tensor's name, shape and
        dtype, all values finite): :class:`tdaot.WeightsError` names the file and tensor,
        and the old weights keep serving. A policy loaded with ``trusted_keys`` also requires
        a valid signature of the file by one of them (:func:`tdaot.sign`), else
        :class:`tdaot.SignatureError` naming the file, and nothing changes."""
        self._policy.swap_weights(os.fspath(path))

    def rollback_weights(self) -> None:
        """Makes the weights live before the last swap (or rollback) live again;
        :class:`tdaot.WeightsError` when nothing was swapped."""
        self._policy.rollback_weights()

    @property
    def weights_sha256(self) -> str:
        """Digest of the live weights (as :func:`tdaot.export_weights` returns it: of every
        tensor of the weight file, the models' constants included); for the package as loaded,
        its manifest's ``weights_sha256`` ("" where it records none: it cannot swap weights)."""
        return self._policy.weights_sha256

    def __repr__(self) -> str:
        ins = ", ".join(self.manifest.input_keys)
        outs = ", ".join(self.manifest.output_keys)
        return f"Policy({self.path!r}, inputs=[{ins}], outputs=[{outs}])"


def load(
    path: str | os.PathLike,
    *,
    intra_op_threads: int | None = None,
    num_runners: int = _DEFAULTS["num_runners"],
    warmup_runs: int = _DEFAULTS["warmup_runs"],
    op_libraries: Sequence[str | os.PathLike] = (),
    expected_sha256: str | None = None,
    temp_dir: str | os.PathLike | None = None,
    max_package_bytes: int = _DEFAULTS["max_package_bytes"],
    model_name: str | None = None,
    trusted_keys: TrustedKeys = (),
    keep_freed_memory: bool = _DEFAULTS["keep_freed_memory"],
) -> Policy:
    """Loads a tdaot package into the native runner: a :class:`tdaot.Policy`, a tensordict
    module (the one way to load a package).

    ``intra_op_threads`` sets torch's intra-op thread count (``torch.set_num_threads``,
    process-wide) for the ATen operators the model calls; None leaves it alone, since a
    Python process usually runs other torch code too. ``num_runners`` model instances
    serve concurrent calls; ``warmup_runs`` runs per instance on zero inputs at load.
    ``op_libraries`` are shared libraries registering the custom operators the package calls
    (its manifest's ``custom_ops``), loaded first; libraries already loaded in this process
    (``torch.ops.load_library``) count too. An operator still missing raises
    :class:`tdaot.MissingOperatorError`; a library that cannot be loaded, :class:`tdaot.PackageError`.

    Before anything is loaded, every file in the package is checked against the sha256 its
    manifest records, and with ``expected_sha256`` (the package's digest, as ``sha256sum`` or
    the build report gives it) the whole file is pinned: a mismatch raises
    :class:`tdaot.IntegrityError`. The files are extracted into a private directory under
    ``temp_dir`` ($TMPDIR or /tmp by default), removed again once the model is loaded.
    Packages (and the unpacked sizes their entries declare) above ``max_package_bytes`` are
    refused, since the file is read into memory to be checked.

    ``trusted_keys`` (Ed25519 public keys, each a PEM text or the path of a PEM file, e.g. the
    ``public.pem`` of ``tdaot keygen``): the package must carry a valid signature of its
    manifest by one of them (``tdaot.sign``), checked right after the manifest is read and
    before anything is extracted or loaded; otherwise :class:`tdaot.SignatureError`. Every
    weight file given to ``swap_weights`` later must be signed by one of them too. Without
    them signatures are not looked at.

    A package may hold several models (``manifest.models``: by default a dynamic-batch
    throughput model and a batch-1 latency model); all are loaded and each call runs on the
    model serving its batch size. ``model_name`` loads that model only (calls at batch sizes it
    does not serve raise :class:`tdaot.BatchSizeError`).

    ``keep_freed_memory`` (default True) keeps the memory a call frees for the next one: glibc's
    malloc trim threshold raised to 256 MiB and its mmap threshold fixed at 32 MiB, for the whole
    process, once, unless the environment sets them (``MALLOC_TRIM_THRESHOLD_``,
    ``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``). Otherwise glibc may return a call's freed
    intermediates to the system and the next call page-faults them in again (tdaot::PolicyOptions).
    """
    return Policy(
        _C.Policy(
            os.fspath(path),
            intra_op_threads=_C.PYTHON_INTRA_OP_THREADS if intra_op_threads is None else intra_op_threads,
            num_runners=num_runners,
            warmup_runs=warmup_runs,
            op_libraries=[os.fspath(lib) for lib in op_libraries],
            expected_sha256=expected_sha256 or "",
            temp_dir=os.fspath(temp_dir) if temp_dir is not None else "",
            max_package_bytes=max_package_bytes,
            model_name=model_name or "",
            trusted_keys=trusted_key_texts(trusted_keys),
            keep_freed_memory=keep_freed_memory,
        )
    )


def verify_package(
    path: str | os.PathLike, expected_sha256: str | None = None, *, trusted_keys: TrustedKeys = ()
) -> str:
    """Checks a package as :func:`load` does, without loading it: its zip structure, its
    manifest, its signature with ``trusted_keys``, every file against the manifest's sha256
    digests and, with ``expected_sha256``, the whole file. Returns the package's sha256; raises
    :class:`tdaot.PackageError` (:class:`tdaot.IntegrityError` for a digest mismatch,
    :class:`tdaot.SignatureError` for a missing or bad signature)."""
    return _C.verify_package(os.fspath(path), expected_sha256 or "", trusted_key_texts(trusted_keys))


def verify_weights(path: str | os.PathLike, *, trusted_keys: TrustedKeys = ()) -> dict[str, str]:
    """Checks a weight file (:func:`tdaot.export_weights`) as ``swap_weights`` does before it
    changes anything, without a package: its structure, digests and values
    (:class:`tdaot.WeightsError`) and, with ``trusted_keys``, a valid signature by one of them
    (:class:`tdaot.SignatureError`). Returns ``{"base_sha256": the package it was made for,
    "base_manifest_sha256": that package's manifest sha256 (what a swap matches; signing the
    package does not change it), "weights_sha256": its weights' digest, "signed_by": the id of
    the key that verified or ""}``."""
    return _C.verify_weights(os.fspath(path), trusted_key_texts(trusted_keys))


def trusted_key_texts(keys: TrustedKeys) -> list[str]:
    """Each trusted key as the runtime takes it: a PEM text or a path (one key alone is fine)."""
    if isinstance(keys, (str, bytes, os.PathLike)):
        keys = [keys]
    return [key.decode() if isinstance(key, bytes) else os.fspath(key) for key in keys]
