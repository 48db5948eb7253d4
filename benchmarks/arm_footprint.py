"""The aarch64 footprint table (issue 51): what a robot's ARM computer is given to run a policy, on
disk, and the lite process's peak resident set under qemu-user, beside the aarch64 runtimes of
ExecuTorch and ONNX Runtime from their PyPI wheels.

- **tdaot**: the bundle of `make lite-aarch64` (dist/tdaot-lite-<version>-linux-aarch64.tar.gz):
  the .tar.gz, and the ELF files it unpacks to (bin/tdaot-lite, lib/libtdaot_lite.so,
  lib/libsleef.so.3), which is everything it loads beyond glibc and libstdc++; and the package
  (the tutorial policy built with cpu_target="aarch64").
- **ONNX Runtime**: `pip download --platform manylinux_2_28_aarch64 --only-binary=:all:
  onnxruntime`: capi/libonnxruntime.so (the C library a C/C++ service links, as unitree_rl_lab's
  deploy code does) and its providers_shared library.
- **ExecuTorch**: the same for `executorch`: the shared libraries of its portable runtime, the
  optimized kernels and the XNNPACK backend (lib/libexecutorch*.so, what a C++ runner with
  XNNPACK loads), the Python bindings left out.
- **peak RSS under qemu**: `qemu-aarch64-static` running `tdaot-lite bench PKG --batch 1 --iters
  1000`, its ru_maxrss read by this process (getrusage of the child), less nothing: qemu's own
  memory is in it, so a row for qemu running a program that returns at once is given as the
  baseline. ExecuTorch's and ONNX Runtime's processes were not run under qemu (their C++ runners
  would have to be cross-built against the wheels' libraries: not done), so they have no RSS.
- **SLEEF accuracy**: benchmarks/arm/sleef_accuracy.c (the NEON functions the kernels call, from
  Debian's arm64 libsleef, against libm in double), cross-built and run under qemu.

qemu's times are not ARM times: nothing here is timed. On the board: `tdaot-lite bench PKG
--batch 1` (docs/arm.md).

    .venv/bin/python benchmarks/arm_footprint.py [--wheels DIR] [--out benchmarks/results/NAME]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QEMU = "qemu-aarch64-static"
QEMU_ENV = {"QEMU_LD_PREFIX": "/usr/aarch64-linux-gnu", "LD_LIBRARY_PATH": "/usr/lib/aarch64-linux-gnu"}
MiB = 1 << 20


def _child_maxrss(command: list[str], env: dict[str, str]) -> float:
    """The peak resident set (MiB) of ``command``, run as a child of a fresh helper process (Linux
    keeps maxrss across execve: a child of this large Python process would report at least its)."""
    helper = (
        "import resource, subprocess, sys, json, os\n"
        "done = subprocess.run(json.loads(sys.argv[1]), stdout=subprocess.DEVNULL, env=os.environ)\n"
        "assert done.returncode == 0, done.returncode\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", helper, json.dumps(command)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    )
    return int(out.stdout.split()[-1]) / 1024


def _elf_sizes(root: str) -> dict[str, int]:
    sizes = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    sizes[os.path.relpath(path, root)] = os.path.getsize(path)
    return sizes


def tdaot_rows(package: str, scratch: str) -> dict:
    bundles = sorted(glob.glob(str(ROOT / "dist" / "tdaot-lite-*-linux-aarch64.tar.gz")))
    if not bundles:
        sys.exit("no bundle: run make lite-aarch64 first")
    bundle = bundles[-1]
    with tarfile.open(bundle) as tar:
        tar.extractall(scratch, filter="data")
    (top,) = os.listdir(scratch)
    root = os.path.join(scratch, top)
    elf = _elf_sizes(root)
    tool = os.path.join(root, "bin", "tdaot-lite")
    bench = [shutil.which(QEMU), tool, "bench", package, "--batch", "1", "--iters", "1000"]
    return {
        "bundle": os.path.basename(bundle),
        "bundle_gz_bytes": os.path.getsize(bundle),
        "elf_bytes": elf,
        "elf_total_mib": round(sum(elf.values()) / MiB, 2),
        "package_bytes": os.path.getsize(package),
        "maxrss_qemu_mib": round(_child_maxrss(bench, QEMU_ENV), 1),
    }


def qemu_baseline(scratch: str) -> float:
    """qemu running an aarch64 program that returns at once (its own resident set)."""
    source = os.path.join(scratch, "empty.c")
    with open(source, "w") as f:
        f.write("int main(void) { return 0; }\n")
    binary = os.path.join(scratch, "empty")
    subprocess.run(["aarch64-linux-gnu-gcc", "-O2", source, "-o", binary], check=True)
    return round(_child_maxrss([shutil.which(QEMU), binary], QEMU_ENV), 1)


def wheel_rows(wheels: str) -> dict:
    rows = {}
    for name, pattern, members in (
        (
            "onnxruntime",
            "onnxruntime-*aarch64.whl",
            ("capi/libonnxruntime.so", "capi/libonnxruntime_providers_shared"),
        ),
        ("executorch", "executorch-*aarch64.whl", ("executorch/lib/libexecutorch",)),
    ):
        found = sorted(glob.glob(os.path.join(wheels, pattern)))
        if not found:
            rows[name] = {"error": f"no {pattern} in {wheels} (pip download it: see the docstring)"}
            continue
        with zipfile.ZipFile(found[-1]) as wheel:
            files = {
                i.filename: i.file_size
                for i in wheel.infolist()
                if any(m in i.filename for m in members) and ".so" in i.filename
            }
        if name == "executorch":  # the CPU runtime: no OpenVINO/QNN backends, no ETDump
            files = {k: v for k, v in files.items() if not any(s in k for s in ("openvino", "qnn", "etdump"))}
        rows[name] = {
            "wheel": os.path.basename(found[-1]),
            "elf_bytes": files,
            "elf_total_mib": round(sum(files.values()) / MiB, 2),
        }
    return rows


def sleef_accuracy(scratch: str) -> list[dict]:
    binary = os.path.join(scratch, "sleef_accuracy")
    subprocess.run(
        [
            "aarch64-linux-gnu-gcc",
            "-O2",
            str(HERE / "arm" / "sleef_accuracy.c"),
            "-lsleef",
            "-lm",
            "-o",
            binary,
        ],
        check=True,
    )
    out = subprocess.run(
        [shutil.which(QEMU), binary],
        capture_output=True,
        text=True,
        env={**os.environ, **QEMU_ENV},
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", default=str(ROOT / "build" / "aarch64" / "wheels"))
    parser.add_argument("--package", help="an aarch64 package (default: the tutorial policy, built)")
    parser.add_argument("--out", help="write NAME.json and NAME.md")
    args = parser.parse_args()
    package = args.package
    with tempfile.TemporaryDirectory() as scratch:
        if package is None:
            sys.path.insert(0, str(ROOT))
            from examples.policies import tutorial_policy

            import tdaot

            policy, example = tutorial_policy()
            package = os.path.join(scratch, "tutorial-aarch64.pt2")
            tdaot.build(policy, example, package, cpu_target="aarch64")
        os.makedirs(os.path.join(scratch, "bundle"))
        result = {
            "host": _cpu_name(),
            "note": "qemu-user on x86: sizes and the resident set are the board's to within qemu's own "
            "memory; no time here is an ARM time (tdaot-lite bench on the board)",
            "tdaot": tdaot_rows(package, os.path.join(scratch, "bundle")),
            "qemu_alone_maxrss_mib": qemu_baseline(scratch),
            "peers": wheel_rows(args.wheels),
            "sleef_accuracy": sleef_accuracy(scratch),
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out + ".json").write_text(text + "\n")
        Path(args.out + ".md").write_text(markdown(result))


def markdown(r: dict) -> str:
    t, peers = r["tdaot"], r["peers"]
    lines = [
        "| aarch64 runtime | shared objects on disk (MiB) | peak RSS under qemu (MiB) |",
        "|---|---:|---:|",
        f"| tdaot lite (bundle, {t['bundle_gz_bytes'] / MiB:.2f} MiB .tar.gz) | {t['elf_total_mib']} | "
        f"{t['maxrss_qemu_mib']} (qemu alone: {r['qemu_alone_maxrss_mib']}) |",
    ]
    for name, row in peers.items():
        size = row.get("elf_total_mib", row.get("error"))
        lines.append(f"| {name} ({row.get('wheel', '-')}) | {size} | not run |")
    lines += ["", "| SLEEF NEON function | max ulp (SLEEF) | max ulp (glibc float) |", "|---|---:|---:|"]
    lines += [
        f"| {a['function']} | {a['sleef_max_ulp']} | {a['libm_float_max_ulp']} |" for a in r["sleef_accuracy"]
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
