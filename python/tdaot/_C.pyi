"""Type stubs of tdaot._C, the pybind11 bindings over the C++ runner (cpp/python/module.cpp).

Use tdaot.load() and tdaot.read_manifest() rather than this module. C++ exceptions arrive as
the classes of the same name in tdaot.errors. tests/python/test_manifest_corpus.py checks that
every public name of the compiled module has a stub here.
"""

import torch

# The AOTInductor metadata key of the manifest JSON ("tdaot.manifest").
MANIFEST_METADATA_KEY: str
# The manifest schema version this runtime reads.
MANIFEST_SCHEMA_VERSION: int
# Records torch's zip writer adds to every archive; never digested, never extracted.
BOOKKEEPING_RECORDS: tuple[str, ...]
# The archive file (under the top folder) holding a package's signatures ("tdaot.sig").
SIGNATURE_ENTRY: str

# Python's intra_op_threads default: 0 leaves torch's setting alone (C++'s default is 1).
PYTHON_INTRA_OP_THREADS: int

def load_option_defaults() -> dict[str, int | str | list[str]]:
    """tdaot::PolicyOptions' fields and their C++ defaults, by name."""

class Policy:
    """A loaded package (tdaot::Policy)."""

    def __init__(
        self,
        path: str,
        *,
        intra_op_threads: int = 0,
        num_runners: int = 1,
        warmup_runs: int = 1,
        op_libraries: list[str] = [],
        expected_sha256: str = "",
        temp_dir: str = "",
        max_package_bytes: int = 4294967296,
        model_name: str = "",
        trusted_keys: list[str] = [],
        keep_freed_memory: bool = True,
    ) -> None:
        """Defaults: tdaot::PolicyOptions' (load_option_defaults), but intra_op_threads 0."""
    @property
    def path(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def manifest_json(self) -> str:
        """The manifest as normalised JSON."""
    def run(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...
    def run_positional(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]: ...
    def bind(
        self,
        batch: int,
        cuda_graph: bool = False,
        envelope: bool = False,
        supervisor: bool | dict[str, object] | None = None,
        record: int = 0,
    ) -> Binding:
        """Preallocated inputs and outputs for `batch` rows (tdaot::Binding)."""
    def swap_weights(self, path: str) -> None:
        """Checks a weight file, then makes it live between calls."""
    def rollback_weights(self) -> None:
        """Makes the weights live before the last swap live again."""
    @property
    def weights_sha256(self) -> str: ...

class Binding:
    """Inputs and outputs preallocated for one batch size, run in place (tdaot::Binding)."""

    @property
    def batch(self) -> int: ...
    @property
    def model(self) -> str:
        """The name of the package's model that serves this batch size."""
    @property
    def allocation_free(self) -> bool:
        """Whether run() takes the allocation-free path."""
    @property
    def cuda_graph(self) -> bool:
        """Whether run() replays a CUDA graph captured when bound."""
    @property
    def inputs(self) -> list[torch.Tensor]:
        """The input tensors (the binding's own memory), in manifest order."""
    @property
    def outputs(self) -> list[torch.Tensor]:
        """The output tensors (the binding's own memory), in manifest order."""
    def input(self, key: str) -> torch.Tensor: ...
    @property
    def interventions(self) -> dict[str, int]:
        """The envelope's and the supervisor's interventions so far (zeros without either)."""
    @property
    def supervised(self) -> bool:
        """Whether a supervisor guards the joint targets."""
    def supervisor(self, row: int = 0) -> tuple[str, float, float, float, int]:
        """Row `row`'s supervisor state: (mode, gain_scale, damping_scale, blend, steps)."""
    def output(self, key: str) -> torch.Tensor: ...
    def run(self) -> None: ...
    def reset(self, mask: torch.Tensor | None = None) -> None: ...
    @property
    def record(self) -> int:
        """The steps the flight recorder keeps (bind's record=N); 0 without it."""
    def dump(self, path: str) -> None:
        """Writes the recorded steps to a flight log (tdaot-flightlog/1) at `path`."""
    def snapshot(self) -> bytes:
        """The bytes dump() would write: every slot whole or marked unfinished, never torn."""

class Session:
    """The recurrent state of one batch of episodes (tdaot::Session)."""

    def __init__(
        self, policy: Policy, batch: int, supervisor: bool | dict[str, object] | None = None
    ) -> None: ...
    @property
    def supervised(self) -> bool:
        """Whether a supervisor guards the joint targets."""
    def supervisor(self, row: int = 0) -> tuple[str, float, float, float, int]:
        """Row `row`'s supervisor state: (mode, gain_scale, damping_scale, blend, steps)."""
    @property
    def batch(self) -> int: ...
    @property
    def input_keys(self) -> list[str]: ...
    @property
    def state(self) -> dict[str, torch.Tensor]: ...
    @property
    def interventions(self) -> dict[str, int]:
        """The safety envelope's and the supervisor's interventions so far: steps by kind."""
    def step(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...
    def step_positional(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]: ...
    def reset(self, mask: torch.Tensor | None = None) -> None: ...

def verify_package(path: str, expected_sha256: str = "", trusted_keys: list[str] = ...) -> str:
    """Checks a package's digests (and signature, with trusted_keys) without loading it; returns
    its sha256."""

def read_manifest_bytes(path: str) -> bytes:
    """The manifest JSON exactly as the package stores it: what a signature signs."""

def weights_signing_payload(path: str) -> bytes:
    """The bytes a signature over a weight file covers, as the runtime reads it."""

def verify_weights(path: str, trusted_keys: list[str] = ...) -> dict[str, str]:
    """Checks a weight file as swap_weights does before changing anything (and its signature,
    with trusted_keys); returns {base_sha256, weights_sha256, signed_by}."""

def file_kind(path: str) -> str:
    """'package' or 'weights', from the file's first bytes; PackageError for anything else."""

def read_manifest_json(path: str) -> str:
    """The manifest of a package, read without loading it and validated, as normalised JSON."""

def parse_manifest_json(json: str, origin: str = "<string>", *, sealed: bool = True) -> str:
    """Validates manifest JSON (sealed=False: no file digests yet); returns it normalised."""

def order_names(key: str, policy: list[str], names: list[str]) -> list[int]:
    """The policy's index of each given name; raises ContractError when they differ."""

def manifest_dtype_names() -> list[str]:
    """The manifest's dtype names, in order."""

def digest_exempt(name: str) -> bool:
    """Whether an archive file name is left out of the manifest's files."""
