"""Writes the package fuzzer's seed archives into OUTDIR (CMake runs it at configure time for
fuzz_package.replay and make fuzz): hand-made zips of a few hundred bytes, each reaching one
refusal of the package reader. No archive is committed; package_seed_metadata.json beside this
script is a real package's model metadata (tdaot's manifest under AOTI's keys)."""

import json
import sys
import zipfile
from pathlib import Path

METADATA = "pkg/data/aotinductor/model/model_wrapper_metadata.json"
STAMP = (2026, 1, 1, 0, 0, 0)  # fixed, so every configure writes the same bytes


def _zip(path: Path, entries: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in entries.items():
            archive.writestr(zipfile.ZipInfo(name, STAMP), data)


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    metadata = json.loads((Path(__file__).parent / "package_seed_metadata.json").read_text())
    cuda = {**metadata, "AOTI_DEVICE_KEY": "cuda"}
    _zip(out / "metadata_only.pt2", {METADATA: json.dumps(metadata).encode()})
    _zip(out / "cuda_key.pt2", {METADATA: json.dumps(cuda).encode()})
    _zip(out / "no_metadata.pt2", {"pkg/data/aotinductor/model/model.so": b"\x7fELF"})
    _zip(out / "traversal.pt2", {"pkg/../../etc/x": b"1"})
    _zip(out / "two_tops.pt2", {"a/x": b"1", "b/y": b"2"})
    _zip(out / "empty_zip.pt2", {})
    (out / "not_zip.pt2").write_bytes(b"PK\x03\x04 not really")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
