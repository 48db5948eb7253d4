"""python docker/tamper.py SRC DST: writes a copy of a .pt2 package with one byte of its compiled
library flipped, as a bad disk or an attacker who leaves the manifest alone would; the runner
must refuse it (the manifest's digest of that file no longer matches)."""

import sys
import zipfile


def tamper(src: str, dst: str) -> str:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        library = next(i.filename for i in zin.infolist() if i.filename.endswith(".so"))
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == library:
                flipped = bytearray(data)
                flipped[len(flipped) // 2] ^= 0xFF
                data = bytes(flipped)
            zout.writestr(info, data)
    return library


if __name__ == "__main__":
    print(f"flipped a byte of {tamper(sys.argv[1], sys.argv[2])}")
