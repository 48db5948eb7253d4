"""The footprint table of `make bench`: the lite runtime (tdaot::lite, no libtorch), the full
runtime (tdaot::runtime, libtorch) and ONNX Runtime, each for one package (the mlp policy).

For each runtime:

- **on disk**: bytes of the runtime's own file and of every shared library it loads beyond
  the C and C++ runtime (glibc's libc/libm/libdl/libpthread/librt/ld-linux, libstdc++,
  libgcc_s), resolved with ldd (symlinks followed, each file counted once). The package itself
  (its model libraries and weights) is not counted: it is the same file for both tdaot runtimes.
- **maxrss after 1000 steps**: the process's peak resident set (ru_maxrss) after loading the
  package and 1000 calls at batch 1, read by benchmarks/cpp/maxrss.c (tdaot-bench-maxrss): Linux
  keeps maxrss across execve, so a process forked straight from this (large) Python process
  would report at least this process's resident set.
- **start to first output**: wall time from just before the process is spawned (fork + exec
  included) to the first line it prints, which each command prints after its first call
  (median and minimum of several starts, the runtimes interleaved), and the CPU time (user +
  sys) those runs took to exit, which a loaded machine inflates less than wall time.

Runtimes and their commands:

- lite: `tdaot-lite bench PKG --batch 1 --iters 1000` and `tdaot-lite run PKG --batch 1`; the
  example `robot_service PKG --steps 1000` (rss) and `--steps 1` (start to exit, an upper bound
  of start to first action: it also prints its statistics and exits).
- full: `tdaot-run bench PKG --batch 1 --bind --iters 1000 --threads 1` and
  `tdaot-run run PKG --batch 1`.
- ONNX Runtime 1.31 from the onnxruntime wheel: on disk its C library (capi/libonnxruntime.so,
  what a C/C++ service would load) and, separately, the capi .so files the Python package loads
  (its pybind11 module holds the runtime itself); rss and start from a Python harness (this
  file's `ort-child` mode: import onnxruntime, one session, intra_op_num_threads=1), so the
  interpreter and numpy are included: the "Python + numpy alone" row is that baseline.
- OpenVINO and ExecuTorch (issue 42): their C++ bench servers (benchmarks/cpp/*_server.cpp) in
  their footprint mode, `SERVER MODEL STEPS INPUTS` (load, first call, print, STEPS calls), on the
  files benchmarks/peers.py made from the same program. On disk: the server's closure, and for
  OpenVINO the CPU plugin and IR reader it opens at run time (dlopen: ldd does not see them).

    .venv/bin/python benchmarks/footprint.py ARTIFACTS_DIR   # prints the JSON (standalone use)
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# The C and C++ runtime every program here loads anyway: not counted.
BASE_LIBS = re.compile(
    r"^(linux-vdso|linux-gate|ld-linux[-\w.]*|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so"
)
STEPS = 1000
STARTS = 7  # starts per command for start-to-first-output (interleaved)
TORCH_LIBS = re.compile(r"lib(torch|c10)[\w-]*\.so")


def ldd_closure(path: Path) -> list[dict]:
    """Every shared library `path` loads (ldd: the whole closure), beyond BASE_LIBS."""
    result = subprocess.run(["ldd", str(path)], capture_output=True, text=True)
    libs, seen = [], set()
    for line in result.stdout.splitlines():
        line = line.strip()
        name = line.split()[0] if line else ""
        if not name or BASE_LIBS.match(Path(name).name):
            continue
        match = re.match(r"(\S+) => (\S+) \(", line)
        if match is None:
            if "not found" in line:
                libs.append({"name": name, "path": None, "bytes": 0, "missing": True})
            continue
        real = os.path.realpath(match.group(2))
        if real in seen:
            continue
        seen.add(real)
        libs.append({"name": Path(real).name, "path": real, "bytes": os.path.getsize(real)})
    return libs


def disk(files: list[Path]) -> dict:
    """The files themselves plus their ldd closure, each file once."""
    entries, seen = [], set()
    for path in files:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            entries.append({"name": Path(real).name, "path": real, "bytes": os.path.getsize(real)})
        for lib in ldd_closure(Path(real)):
            if lib["path"] is None or lib["path"] not in seen:
                seen.add(lib["path"])
                entries.append(lib)
    return {"bytes": sum(e["bytes"] for e in entries), "files": entries}


def pinned(cpu: int | None):
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def start_and_rss(command: list[str], env: dict, cpu: int | None, maxrss_tool: Path | None = None) -> dict:
    """Spawns `command`: seconds to its first stdout line and to its exit; with `maxrss_tool`
    (tdaot-bench-maxrss) in front of it, also its maxrss in KiB."""
    if maxrss_tool is not None:
        command = [str(maxrss_tool), *command]
    started = time.perf_counter()
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=pinned(cpu),
    )
    first = proc.stdout.readline()
    first_s = time.perf_counter() - started
    rest = proc.stdout.read()
    errors = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    exit_s = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu_s = usage.ru_utime + usage.ru_stime  # the command's own CPU time, whatever the load
    out = {"first_output_s": first_s if first else None, "exit_s": exit_s, "cpu_s": cpu_s}
    text = errors.decode(errors="replace")
    if maxrss_tool is not None:
        found = re.findall(r"tdaot-bench-maxrss: maxrss_kib=(\d+)", text)
        out["maxrss_kib"] = int(found[-1]) if found else None
    if proc.returncode != 0:
        out["error"] = (text.strip() or f"exit code {proc.returncode}")[-400:]
    out["stdout"] = (first + rest).decode(errors="replace")[-2000:]
    return out


def onnxruntime_dir(python: str, env: dict) -> Path | None:
    result = subprocess.run(
        [python, "-c", "import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))"],
        capture_output=True,
        text=True,
        env=env,
    )
    return Path(result.stdout.strip()) if result.returncode == 0 else None


def measure(
    artifacts: Path,
    *,
    tdaot_lite: Path,
    tdaot_run: Path,
    robot_service: Path | None,
    maxrss_tool: Path | None,
    python: str,
    env: dict,
    cpu: int | None,
    peer_servers: dict[str, Path] | None = None,
) -> dict:
    """The footprint of each runtime for the package in `artifacts` (policy.pt2, policy.onnx)."""
    package = str(artifacts / "policy.pt2")
    onnx_model = artifacts / "policy.onnx"
    ort = onnxruntime_dir(python, env)
    have_robot = robot_service is not None and robot_service.is_file()
    rows: dict[str, dict] = {}

    def row(key: str, label: str, **fields) -> dict:
        rows[key] = {"label": label, **fields}
        return rows[key]

    # --- on disk ---------------------------------------------------------------------------------
    if tdaot_lite.is_file():
        lite = row("lite", "tdaot lite (tdaot-lite)", disk=disk([tdaot_lite]))
        lite["torch_in_closure"] = any(TORCH_LIBS.match(f["name"]) for f in lite["disk"]["files"])
    if have_robot:
        row("lite-robot", "tdaot lite: robot_service", disk=disk([robot_service]))
    if tdaot_run.is_file():
        row("full", "tdaot full runtime (tdaot-run)", disk=disk([tdaot_run]))
    if ort is not None:
        capi = ort / "capi"
        c_libs = sorted(capi.glob("libonnxruntime.so*"))
        if c_libs:
            row("ort-c", "ONNX Runtime, C library (libonnxruntime.so)", disk=disk(c_libs[:1]))
        py_libs = sorted(p for p in capi.iterdir() if p.suffix == ".so" and "libonnxruntime.so" not in p.name)
        row("ort-py", "ONNX Runtime, Python (capi .so files; numpy not counted)", disk=disk(py_libs))
    peer_commands = peer_rows(artifacts, peer_servers or {}, row)
    row("python", "Python + numpy alone (the ORT rows' baseline)")

    # --- maxrss after 1000 steps and start to first output ---------------------------------------
    commands: dict[str, dict[str, list[str]]] = {}
    if "lite" in rows:
        commands["lite"] = {
            "rss": [str(tdaot_lite), "bench", package, "--batch", "1", "--iters", str(STEPS)]
            + ["--warmup", "0"],
            "start": [str(tdaot_lite), "run", package, "--batch", "1"],
        }
    if have_robot:
        service = [str(robot_service), package, "--rate", "1000000"]
        commands["lite-robot"] = {
            "rss": [*service, "--steps", str(STEPS)],
            "start": [*service, "--steps", "1"],
            "start_measure": "exit_s",
        }
    if "full" in rows:
        commands["full"] = {
            "rss": [
                str(tdaot_run),
                "bench",
                package,
                "--batch",
                "1",
                "--bind",
                "--iters",
                str(STEPS),
                "--warmup",
                "0",
                "--threads",
                "1",
            ],
            "start": [str(tdaot_run), "run", package, "--batch", "1"],
        }
    if ort is not None and onnx_model.is_file():
        child = [python, str(Path(__file__).resolve()), "ort-child", str(onnx_model)]
        commands["ort-py"] = {"rss": [*child, str(STEPS)], "start": [*child, "1"]}
    commands.update(peer_commands)
    commands["python"] = {
        "rss": [python, "-c", "import numpy; print(numpy.__version__)"],
        "start": [python, "-c", "import numpy; print(numpy.__version__)"],
    }

    def show(command: list[str]) -> str:
        here = str(Path(__file__).resolve())
        # The peers' commands: their model files by name, their input specs (JSON) as INPUTS.
        names = {c: Path(c).name for c in command if c.startswith(str(artifacts))}
        names.update({c: "INPUTS" for c in command if c.startswith("[{")})
        names.update({package: "PKG", str(onnx_model): "policy.onnx", here: "footprint.py"})
        return " ".join(Path(c).name if i == 0 else names.get(c, c) for i, c in enumerate(command))

    have_maxrss = maxrss_tool is not None and maxrss_tool.is_file()
    for key, cmds in commands.items():
        rows[key]["rss_command"] = show(cmds["rss"])
        if not have_maxrss:
            continue
        result = start_and_rss(cmds["rss"], env, cpu, maxrss_tool)
        rows[key]["maxrss_kib"] = result["maxrss_kib"]
        if "error" in result:
            rows[key]["error"] = result["error"]
    starts: dict[str, list[float]] = {key: [] for key in commands}
    cpu_times: dict[str, list[float]] = {key: [] for key in commands}
    for _ in range(STARTS + 1):  # the first round warms the page cache: not counted
        for key, cmds in commands.items():
            result = start_and_rss(cmds["start"], env, cpu)
            value = result.get(cmds.get("start_measure", "first_output_s"))
            if "error" in result:
                rows[key]["error"] = result["error"]
            elif value is not None:
                starts[key].append(value)
                cpu_times[key].append(result["cpu_s"])
    for key, cmds in commands.items():
        values = starts[key][1:] if len(starts[key]) > STARTS else starts[key]
        rows[key]["start_command"] = show(cmds["start"])
        rows[key]["start_measure"] = (
            "to exit (upper bound)" if cmds.get("start_measure") == "exit_s" else "to first output"
        )
        if values:
            rows[key]["start_cpu_median_s"] = statistics.median(cpu_times[key][-len(values) :])
            rows[key]["start_median_s"] = statistics.median(values)
            rows[key]["start_min_s"] = min(values)
            rows[key]["start_n"] = len(values)

    # The lite process maps no libtorch or c10 (its /proc/self/maps after a run, as
    # tdaot.testing.assert_parity(runtime="lite") checks it).
    if "lite" in rows:
        maps_file = artifacts / "lite-maps.txt"
        subprocess.run(
            [str(tdaot_lite), "run", package, "--batch", "1", "--maps", str(maps_file)],
            capture_output=True,
            env=env,
        )
        if maps_file.is_file():
            mapped = {line.split()[-1] for line in maps_file.read_text().splitlines() if "/" in line}
            rows["lite"]["torch_mapped"] = sorted(p for p in mapped if TORCH_LIBS.search(Path(p).name))
            rows["lite"]["mapped_libraries"] = sorted(
                Path(p).name for p in mapped if ".so" in Path(p).name and not BASE_LIBS.match(Path(p).name)
            )
    return {
        "package": package,
        "package_bytes": os.path.getsize(package),
        "onnx_bytes": sum(
            os.path.getsize(p) for p in (onnx_model, Path(str(onnx_model) + ".data")) if p.is_file()
        ),
        "steps": STEPS,
        "starts": STARTS,
        "rows": rows,
    }


def peer_rows(artifacts: Path, servers: dict[str, Path], row) -> dict[str, dict[str, list[str]]]:
    """The peers' on-disk rows (via ``row``) and their commands, for those built and checked."""
    import peers

    status = peers.read_status(artifacts)
    inputs = json.dumps(json.loads((artifacts / "info.json").read_text())["inputs"])
    commands = {}
    for kind, server in servers.items():
        made = status[kind]
        if not server.is_file() or "error" in made:
            row(kind, f"{kind}: not measured", error=made.get("error") or f"{server.name} not built")
            continue
        if kind == "openvino":
            # The CPU plugin and the IR reader, opened by path at run time: not in ldd's closure.
            libs = [Path(lib["path"]) for lib in ldd_closure(server) if "libopenvino.so" in lib["name"]]
            base = libs[0].parent if libs else server.parent
            plugin = "libopenvino_intel_cpu_plugin.so"
            opened = [*base.glob(plugin), *base.glob("libopenvino_ir_frontend.so*")]
            files = [server, *opened[:2]]
            row(kind, "OpenVINO C++ (libopenvino, its CPU plugin and IR reader)", disk=disk(files))
            model = str(artifacts / made["file"])
        else:
            row(kind, "ExecuTorch C++ (libexecutorch, XNNPACK backend, kernels)", disk=disk([server]))
            model = str(artifacts / "policy-b{batch}.pte")
        commands[kind] = {
            "rss": [str(server), model, str(STEPS), inputs],
            "start": [str(server), model, "1", inputs],
        }
    return commands


def ort_child(model: str, steps: int) -> int:
    """The ONNX Runtime harness: one session, one intra-op thread, `steps` calls at batch 1;
    prints the first output as soon as the first call returns."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    types = {
        "tensor(float)": np.float32,
        "tensor(uint8)": np.uint8,
        "tensor(bool)": np.bool_,
        "tensor(int64)": np.int64,
        "tensor(double)": np.float64,
    }
    feeds = {}
    for spec in session.get_inputs():
        shape = [1] + [d if isinstance(d, int) else 1 for d in spec.shape[1:]]
        feeds[spec.name] = np.zeros(shape, dtype=types.get(spec.type, np.float32))
    out = session.run(None, feeds)
    print(json.dumps([o.ravel()[:4].tolist() for o in out]), flush=True)
    for _ in range(steps - 1):
        session.run(None, feeds)
    return 0


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "ort-child":
        return ort_child(sys.argv[2], int(sys.argv[3]))
    artifacts = Path(sys.argv[1])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    print(
        json.dumps(
            measure(
                artifacts,
                tdaot_lite=ROOT / "build/cpp/tdaot-lite",
                tdaot_run=ROOT / "build/cpp/tdaot-run",
                robot_service=ROOT / "build/bench/cpp/robot_service",
                maxrss_tool=ROOT / "build/bench/cpp/tdaot-bench-maxrss",
                python=sys.executable,
                env=env,
                cpu=None,
                peer_servers={
                    "openvino": ROOT / "build/bench/cpp/tdaot-bench-openvino-server",
                    "executorch": ROOT / "build/bench/cpp/tdaot-bench-executorch-server",
                },
            ),
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
