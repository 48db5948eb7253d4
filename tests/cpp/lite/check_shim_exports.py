"""Checks that the aoti_torch_* functions libtdaot_lite.so exports (its ELF dynamic symbol
table: defined, global or weak, default visibility) are exactly SHIM_FUNCTIONS of
python/tdaot/builder/lite_symbols.py, the list the build side checks each model's needs against.

Usage: check_shim_exports.py LIBTDAOT_LITE_SO LITE_SYMBOLS_PY
"""

import importlib.util
import sys

from elftools.elf.elffile import ELFFile


def exported_shim_functions(library: str) -> set[str]:
    with open(library, "rb") as f:
        dynsym = ELFFile(f).get_section_by_name(".dynsym")
        names = set()
        for symbol in dynsym.iter_symbols():
            if not symbol.name.startswith("aoti_torch_"):
                continue
            if symbol["st_shndx"] == "SHN_UNDEF":
                continue
            if symbol["st_info"]["bind"] not in ("STB_GLOBAL", "STB_WEAK"):
                continue
            if symbol["st_other"]["visibility"] not in ("STV_DEFAULT", "STV_PROTECTED"):
                continue
            names.add(symbol.name)
        return names


def main(library: str, lite_symbols: str) -> int:
    # Loaded by path: importing the tdaot package would import torch.
    spec = importlib.util.spec_from_file_location("lite_symbols", lite_symbols)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    listed = set(module.SHIM_FUNCTIONS)
    exported = exported_shim_functions(library)
    print(f"{library}: {len(exported)} aoti_torch_* functions exported; {lite_symbols}: {len(listed)} listed")
    ok = True
    if exported - listed:
        print(f"exported but not in SHIM_FUNCTIONS: {sorted(exported - listed)}")
        ok = False
    if listed - exported:
        print(f"in SHIM_FUNCTIONS but not exported: {sorted(listed - exported)}")
        ok = False
    if ok:
        print("ok: the exports equal SHIM_FUNCTIONS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
