"""python docker/tamper.py SRC DST: writes a copy of a .pt2 package with one byte of each of its
compiled libraries flipped, as a bad disk or an attacker who leaves the manifest alone would; the
runner must refuse it (the manifest's digest of a library it loads no longer matches). Each
library: the lite runtime reads only the files of the models it loads (its batch-specialised
ones), the full runtime every model's."""

import sys
import zipfile


def tamper(src: str, dst: str) -> list[str]:
    flipped = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith(".so"):
                changed = bytearray(data)
                changed[len(changed) // 2] ^= 0xFF
                data = bytes(changed)
                flipped.append(info.filename)
            zout.writestr(info, data)
    return flipped


if __name__ == "__main__":
    print("flipped a byte of " + ", ".join(tamper(sys.argv[1], sys.argv[2])))
