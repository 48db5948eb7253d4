"""tdaot against the runtimes users would pick instead, side by side in one run (`make bench`).

For each policy (benchmarks/policies.py) it builds every runtime's artifact from the same
weights, timing export and compile cold (empty inductor cache) and cached, then starts one
process per (runtime, policy): a Python worker (benchmarks/worker.py), the C++ server
(benchmarks/cpp/bench_server.cpp) or, for the lite runtime (tdaot::lite, no libtorch), its own
server linked only to it (benchmarks/cpp/lite_server.cpp), timed at the batch sizes the
package's lite models serve (batch 1 for tdaot.build's default), or for OpenVINO and ExecuTorch
their C++ servers (benchmarks/cpp/openvino_server.cpp, executorch_server.cpp, on the files
benchmarks/peers.py made and checked), timed at batch 1. Each process loads its model
(load time), makes a first call (first-call time) and is checked against the eager policy's
outputs. Then the timing rounds: every round visits every policy and batch size, and at each
one runs a chunk of calls in every runtime, in an order rotated from round to round, so drift
on the machine hits all runtimes alike. Samples are pooled over the rounds. Peak RSS is each
process's VmHWM at the end. Every process gets one intra-op thread (OMP/MKL_NUM_THREADS=1,
set_num_threads(1), ONNX Runtime intra_op_num_threads=1) and is pinned to one CPU (--cpu).
One runtime, "tdaot-copy",
is the control: the same package in a second C++ server process (identical models in two
processes measured 0.71-1.30x of each other in one run on the development VM). After the
rounds: the cross-checks through the command-line tools (tdaot-run bench; tdaot-run bench
--bind beside tdaot-lite bench); the one-process stage at batches of 64 and up (ONNX Runtime,
OpenVINO, ExecuTorch, the raw AOTI loader and tdaot called in turn in one process,
benchmarks/alternate.py), which decides ratios that close; and the footprint table of the lite
runtime, the full runtime, ONNX Runtime, OpenVINO and ExecuTorch for the mlp package
(benchmarks/footprint.py). The pixel networks are timed at batch 1 and 64 only.

    .venv/bin/python benchmarks/run.py --server build/bench/cpp/tdaot-bench-server [--rounds 5]

Writes benchmarks/results/<date>-<host>[-<tag>].json, .md and .png (see benchmarks/report.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import flops  # noqa: E402
import footprint  # noqa: E402
import peers  # noqa: E402
import report  # noqa: E402
from policies import DESCRIPTIONS, POLICIES, timed_batches  # noqa: E402

# (key, label, kind): kind "py" runs in benchmarks/worker.py, "cpp" in the C++ server, "lite" in
# the lite runtime's server (no libtorch in its process).
RUNTIMES = [
    ("eager", "eager TensorDictModule (Py)", "py"),
    ("export-module", "ExportedProgram.module() (Py)", "py"),
    ("torch-compile", "torch.compile (Py)", "py"),
    ("aoti-python", "AOTI aoti_load_package (Py)", "py"),
    ("torchscript-python", "TorchScript (Py)", "py"),
    ("onnxruntime", "ONNX Runtime (Py)", "py"),
    ("tdaot-python-td", "tdaot Python, TensorDict (Py)", "py"),
    ("tdaot-python", "tdaot Python, positional (Py)", "py"),
    ("tdaot-python-latency", "tdaot Python, positional, latency build (Py)", "py"),
    ("torchscript", "TorchScript torch::jit::load (C++)", "cpp"),
    ("aoti", "AOTI AOTIModelPackageLoader (C++)", "cpp"),
    ("aoti-single-threaded", "AOTI loader, run_single_threaded (C++)", "cpp"),
    ("tdaot-latency", "tdaot native, latency build (C++)", "cpp"),
    ("tdaot", "tdaot native (C++)", "cpp"),
    # The control: the same package in a second server process. Its ratio to tdaot native is the
    # spread between two processes running identical models, in this run.
    ("tdaot-copy", "tdaot native, second process (C++)", "cpp"),
    ("tdaot-specialized", "tdaot native, specialize=1,64,256,4096 (C++)", "cpp"),
    ("tdaot-bound", "tdaot native, bound (C++)", "cpp"),
    ("tdaot-lite-bound", "tdaot lite, bound (C++)", "lite"),
    # The peers' C++ APIs on the files benchmarks/peers.py made and checked, at batch 1 (issue 42).
    ("openvino-cpp", "OpenVINO ov::InferRequest (C++)", "openvino"),
    ("executorch-cpp", "ExecuTorch Module, XNNPACK (C++)", "executorch"),
]
# The peers' servers (benchmarks/cpp/*_server.cpp), beside --server, and the batches they time.
PEER_SERVERS = {"openvino": "tdaot-bench-openvino-server", "executorch": "tdaot-bench-executorch-server"}
PEER_BATCHES = [1]
NATIVE_KINDS = ("cpp", "lite", *PEER_SERVERS)
NATIVE = "tdaot"
LABELS = {key: label for key, label, _ in RUNTIMES}

# Per batch size: calls per chunk, the fewest calls per chunk, and a chunk's time budget.
CHUNKS = {1: (2000, 20, 0.2), 64: (500, 10, 0.2), 256: (200, 5, 0.25), 4096: (40, 2, 0.3)}
# Untimed calls before the rounds (or their time budget), per batch size.
WARMUP = {1: (300, 0.15), 64: (100, 0.15), 256: (20, 0.15), 4096: (2, 0.3)}
ARTIFACT_FILE = {
    "export-module": "program.pt2",
    "torch-compile": "program.pt2",
    "aoti-python": "policy-throughput.pt2",
    "torchscript-python": "policy.ts",
    "onnxruntime": "policy.onnx",
    "tdaot-python-td": "policy.pt2",
    "tdaot-python": "policy.pt2",
    "torchscript": "policy.ts",
    "aoti": "policy-throughput.pt2",
    "aoti-single-threaded": "policy-throughput.pt2",
    "tdaot": "policy.pt2",
    "tdaot-copy": "policy.pt2",
    "tdaot-specialized": "policy-specialized.pt2",
    "tdaot-bound": "policy.pt2",
    "tdaot-lite-bound": "policy.pt2",
    "tdaot-python-latency": "policy-latency.pt2",
    "tdaot-latency": "policy-latency.pt2",
    "openvino-cpp": "policy.xml",
    "executorch-cpp": "policy-b{batch}.pte",
    "eager": "weights.pt",
}
# The C++ server's runner for a runtime key, where they differ (the latency build is the
# same tdaot::Policy on another package, the copy the same package).
SERVER_RUNTIME = {"tdaot-latency": "tdaot", "tdaot-specialized": "tdaot", "tdaot-copy": "tdaot"}
# Calls over which the C++ rows' allocations are counted (N and 2N), per batch size.
ALLOC_CALLS = {1: 200, 64: 50, 256: 20, 4096: 5}
COMMAND_TIMEOUT_S = 600


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        )
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def base_env(cache_dir: Path | None = None) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    env["PYTHONWARNINGS"] = "ignore"
    if cache_dir is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    return env


def pinned(cpu: int | None):
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


# --- build -----------------------------------------------------------------------------------
def build_phase(policies: list[str], work: Path, python: str) -> dict:
    """Every artifact of every policy, cold (fresh process, empty inductor cache) then cached."""
    builds = {}
    for name in policies:
        cache = work / "inductor-cache" / name
        shutil.rmtree(cache, ignore_errors=True)
        builds[name] = {}
        for phase, out in (("cold", work / "artifacts" / name), ("cached", work / "rebuild" / name)):
            timings = work / f"build-{name}-{phase}.json"
            log(f"build {name} ({phase})")
            with open(work / "logs" / f"build-{name}-{phase}.log", "w") as errors:
                started = time.perf_counter()
                subprocess.run(
                    [python, str(HERE / "artifacts.py"), name, str(out), str(timings)],
                    check=True,
                    stdout=errors,
                    stderr=errors,
                    env=base_env(cache),
                )
            builds[name][phase] = json.loads(timings.read_text())
            builds[name][phase]["process_s"] = time.perf_counter() - started
    return builds


# --- workers ---------------------------------------------------------------------------------
class Worker:
    """One runtime holding one policy in its own process, driven over a JSON line protocol."""

    def __init__(self, runtime: str, kind: str, policy: str, args, work: Path) -> None:
        self.runtime, self.kind, self.policy = runtime, kind, policy
        self.artifacts = work / "artifacts" / policy
        self.error: str | None = None
        if kind == "py":
            command = [args.python, str(HERE / "worker.py"), runtime, policy, str(self.artifacts)]
        elif kind == "lite":
            command = [str(args.lite_server)]
        elif kind in PEER_SERVERS:
            command = [str(Path(args.server).parent / PEER_SERVERS[kind])]
        else:
            command = [str(args.server)]
        env = base_env(work / "inductor-cache" / policy)
        counter = alloc_counter(args)
        if kind in NATIVE_KINDS and counter is not None:
            env["LD_PRELOAD"] = str(counter)  # allocations per call, counted from outside
        self.log = open(work / "logs" / f"{runtime}-{policy}.log", "w")
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            bufsize=1,
            env=env,
            preexec_fn=pinned(args.cpu),
        )

    def ask(self, request: dict, timeout: float = COMMAND_TIMEOUT_S) -> dict:
        if self.error:
            raise RuntimeError(self.error)
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else ""
        except (BrokenPipeError, OSError) as err:
            line, self.error = "", f"worker pipe: {err}"
        if not line:
            self.error = (
                self.error or f"no answer to {request['cmd']} (exit code {self.proc.poll()}); see the log"
            )
            self.close()
            raise RuntimeError(self.error)
        answer = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError(answer.get("error", "unknown error"))
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"cmd": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_worker(runtime: str, kind: str, policy: str, args, work: Path, info: dict, record: dict):
    """Start, load, first call, parity check and warm-up; fills ``record`` with what it saw. None
    for a peer that cannot run the policy (``record["error"]`` says why)."""
    if kind in PEER_SERVERS:
        # Why a peer's row is empty: its server was not built, or its build could not run the policy.
        made = peers.read_status(work / "artifacts" / policy)[kind]
        server = Path(args.server).parent / PEER_SERVERS[kind]
        why = made.get("error") or (None if server.is_file() else f"{server.name} not built")
        if why:
            record["error"] = why
            log(f"  {runtime} / {policy}: {why}")
            return None
        record["parity_max_abs_error"] = made["max_abs_error"]  # peers.py, on these files
    worker = Worker(runtime, kind, policy, args, work)
    try:
        load = {"cmd": "load"}
        if kind in NATIVE_KINDS:
            load.update(
                runtime=SERVER_RUNTIME.get(runtime, runtime),
                path=str(worker.artifacts / ARTIFACT_FILE[runtime]),
                inputs=info["inputs"],
                batches=PEER_BATCHES,
            )
        loaded = worker.ask(load)
        record["load_s"] = loaded["seconds"]
        if "batch_sizes" in loaded:  # the lite server: only what the package's lite models serve
            record["batch_sizes"] = loaded["batch_sizes"]
        record["first_call_s"] = worker.ask({"cmd": "first", "batch": 1})["seconds"]
        record["rss_after_first_call_mib"] = worker.ask({"cmd": "memory"})["VmRSS_kib"] / 1024
        if kind == "py":
            cases = worker.ask({"cmd": "check", "path": str(worker.artifacts / "check.pt")})["cases"]
            record["parity_max_abs_error"] = max(c["max_abs_error"] for c in cases)
        else:
            record.setdefault("parity_max_abs_error", None)  # the same files the Python rows checked
        for batch in args.batches:
            if batch not in record.get("batch_sizes", [batch]) or batch not in timed_batches(policy):
                continue
            iters, budget = WARMUP[batch]
            worker.ask({"cmd": "run", "batch": batch, "iters": iters, "min_iters": 1, "max_seconds": budget})
            if kind in NATIVE_KINDS:
                counted = worker.ask({"cmd": "allocs", "batch": batch, "calls": ALLOC_CALLS[batch]})
                record.setdefault("allocs_per_call", {})[str(batch)] = counted["per_call"]
    except RuntimeError as err:
        record["error"] = str(err)
        log(f"  {runtime} / {policy}: {err}")
    return worker


def alloc_counter(args) -> Path | None:
    """The malloc-family counter the C++ rows preload (benchmarks/cpp/alloc_counter.c), if built."""
    counter = Path(args.server).parent / "libtdaot-alloc-counter.so"
    return counter if counter.is_file() else None


def skipped(runtime: str, policy: str, batch: int, args, record: dict | None = None) -> str | None:
    """Why a combination is not timed, or None."""
    if runtime in args.skip_runtimes:
        return "skipped by --skip"
    if batch not in timed_batches(policy):
        return f"{policy} is timed at batch {', '.join(map(str, timed_batches(policy)))} only"
    served = (record or {}).get("batch_sizes")
    if served is not None and batch not in served:
        whose = "this peer's C++ row is" if runtime.endswith("-cpp") else "the package's lite models serve"
        return f"{whose} batch {', '.join(map(str, served)) or 'none'} only"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--server",
        default=str(ROOT / "build/bench/cpp/tdaot-bench-server"),
        help="the C++ bench server (benchmarks/cpp)",
    )
    parser.add_argument(
        "--tdaot-run",
        default=str(ROOT / "build/cpp/tdaot-run"),
        help="tdaot-run, for a cross-check of the native numbers (skipped if missing)",
    )
    parser.add_argument(
        "--lite-server",
        default=None,
        help="the lite runtime's bench server (default: tdaot-bench-lite-server beside --server)",
    )
    parser.add_argument(
        "--tdaot-lite",
        default=None,
        help="tdaot-lite, for its cross-check and the footprint table (default: beside --tdaot-run)",
    )
    parser.add_argument(
        "--footprint-policy", default="mlp", help="the package of the footprint table ('' to skip it)"
    )
    parser.add_argument("--tag", default="", help="appended to the results' file names (<date>-<host>-<tag>)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--runtimes", default=",".join(key for key, _, _ in RUNTIMES))
    parser.add_argument("--skip", dest="skip_runtimes", default="", help="runtimes to leave out")
    parser.add_argument("--batches", default="1,64,256,4096")
    parser.add_argument(
        "--cpu",
        type=int,
        default=os.cpu_count() - 1,
        help="the CPU every timed process is pinned to (-1: no pinning)",
    )
    parser.add_argument("--work", default=str(ROOT / "build/bench"), help="artifacts, logs, caches")
    parser.add_argument("--results", default=str(HERE / "results"))
    parser.add_argument("--no-build", action="store_true", help="reuse the artifacts of the last run")
    parser.add_argument(
        "--alternate-seconds",
        type=float,
        default=8.0,
        help="per policy and batch of 64 or more: ONNX Runtime, the AOTI loader and tdaot in one "
        "process, one call each (benchmarks/alternate.py; 0 to skip)",
    )
    args = parser.parse_args()
    args.cpu = None if args.cpu < 0 else args.cpu
    args.lite_server = args.lite_server or str(Path(args.server).parent / "tdaot-bench-lite-server")
    args.tdaot_lite = args.tdaot_lite or str(Path(args.tdaot_run).parent / "tdaot-lite")
    args.batches = [int(b) for b in args.batches.split(",")]
    args.skip_runtimes = set(filter(None, args.skip_runtimes.split(",")))
    policies = args.policies.split(",")
    wanted = args.runtimes.split(",")
    runtimes = [(key, kind) for key, _, kind in RUNTIMES if key in wanted and key not in args.skip_runtimes]
    work = Path(args.work)
    (work / "logs").mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    now = datetime.datetime.now(datetime.UTC)
    context = {
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "host": socket.gethostname(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "pinned_cpu": args.cpu,
        "command": "make bench  (" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) + ")",
        "git": git_revision(),
        "rounds": args.rounds,
        "chunks": {str(b): dict(zip(("iters", "min_iters", "max_seconds"), CHUNKS[b])) for b in args.batches},
        "load_average_start": load_average(),
    }
    versions = subprocess.run(
        [
            args.python,
            "-c",
            "import torch, tensordict, onnxruntime, onnx; print(torch.__version__, "
            "tensordict.__version__, onnxruntime.__version__, onnx.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    context["versions"] = dict(zip(("torch", "tensordict", "onnxruntime", "onnx"), versions))

    if args.no_build:
        builds = json.loads((work / "builds.json").read_text())
    else:
        builds = build_phase(policies, work, args.python)
        (work / "builds.json").write_text(json.dumps(builds, indent=2) + "\n")
    context["build_seconds"] = time.perf_counter() - started
    infos = {p: json.loads((work / "artifacts" / p / "info.json").read_text()) for p in policies}

    # Start every (runtime, policy) process, one at a time so loads do not overlap.
    workers: dict[tuple[str, str], Worker] = {}
    startup: dict[str, dict[str, dict]] = {p: {} for p in policies}
    for policy in policies:
        for runtime, kind in runtimes:
            log(f"start {runtime} / {policy}")
            record = startup[policy].setdefault(runtime, {})
            workers[runtime, policy] = start_worker(runtime, kind, policy, args, work, infos[policy], record)

    peak_tool = Path(args.server).parent / "tdaot-bench-fma-peak"
    context["fma_peak"] = [flops.measure_peak(peak_tool, pinned(args.cpu))]
    context["load_average_rounds_start"] = load_average()
    samples: dict[tuple[str, str, int], list[int]] = {}
    skips: dict[str, str] = {}
    for round_index in range(args.rounds):
        log(f"round {round_index + 1}/{args.rounds} (load average {load_average()})")
        for policy in policies:
            for batch in args.batches:
                shift = round_index % len(runtimes)
                for runtime, _ in runtimes[shift:] + runtimes[:shift]:
                    worker = workers[runtime, policy]
                    reason = skipped(runtime, policy, batch, args, startup[policy][runtime])
                    if reason or "error" in startup[policy][runtime] or worker.error:
                        skips[f"{runtime}/{policy}/{batch}"] = (
                            reason or startup[policy][runtime].get("error") or worker.error
                        )
                        continue
                    iters, min_iters, budget = CHUNKS[batch]
                    try:
                        ns = worker.ask(
                            {
                                "cmd": "run",
                                "batch": batch,
                                "iters": iters,
                                "min_iters": min_iters,
                                "max_seconds": budget,
                            }
                        )["ns"]
                    except RuntimeError as err:
                        skips[f"{runtime}/{policy}/{batch}"] = str(err)
                        continue
                    samples.setdefault((runtime, policy, batch), []).extend(ns)
    context["load_average_rounds_end"] = load_average()
    context["fma_peak"].append(flops.measure_peak(peak_tool, pinned(args.cpu)))

    for (runtime, policy), worker in workers.items():
        if worker is None:  # a peer that could not start (its record says why)
            continue
        try:
            memory = worker.ask({"cmd": "memory"})
            startup[policy][runtime]["peak_rss_mib"] = memory["VmHWM_kib"] / 1024
        except RuntimeError:
            pass
        worker.close()

    crosscheck = tdaot_run_crosscheck(args, work, policies)
    alternation = alternate_stage(args, work, policies, {key for key, _ in runtimes})
    lite_check = lite_crosscheck(args, work, policies)
    context["load_average_footprint_start"] = load_average()
    footprints = None
    if args.footprint_policy and args.footprint_policy in policies:
        log(f"footprint ({args.footprint_policy})")
        footprints = footprint.measure(
            work / "artifacts" / args.footprint_policy,
            tdaot_lite=Path(args.tdaot_lite),
            tdaot_run=Path(args.tdaot_run),
            robot_service=Path(args.server).parent / "robot_service",
            maxrss_tool=Path(args.server).parent / "tdaot-bench-maxrss",
            python=args.python,
            env=base_env(),
            cpu=args.cpu,
            peer_servers={kind: Path(args.server).parent / name for kind, name in PEER_SERVERS.items()},
        )
        footprints["policy"] = args.footprint_policy
    context["load_average_end"] = load_average()
    context["total_seconds"] = time.perf_counter() - started

    results = {
        "context": context,
        "policies": {p: {"description": DESCRIPTIONS[p], **infos[p]} for p in policies},
        "runtimes": {key: LABELS[key] for key, _ in runtimes},
        "native": NATIVE,
        "timing": [
            {
                "runtime": r,
                "policy": p,
                "batch": b,
                **report.stats(ns, b),
                "allocs_per_call": startup[p][r].get("allocs_per_call", {}).get(str(b)),
            }
            for (r, p, b), ns in samples.items()
        ],
        "startup": startup,
        "builds": builds,
        "skipped": skips,
        "tdaot_run_crosscheck": crosscheck,
        "lite_crosscheck": lite_check,
        "alternation": alternation,
        "footprint": footprints,
    }
    results_dir = Path(args.results)
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = results_dir / "-".join(filter(None, (now.strftime("%Y-%m-%d"), context["host"], args.tag)))
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    markdown = report.markdown(results)
    stem.with_suffix(".md").write_text(markdown)
    try:
        report.plot(results, stem.with_suffix(".png"))
        written = ".json, .md, .png"
    except ImportError as err:  # matplotlib is a make bench dependency; a bare venv lacks it
        log(f"no plot: {err}")
        written = ".json, .md"
    print(markdown)
    log(f"wrote {stem}{written} in {context['total_seconds']:.0f} s")
    return 0


def tdaot_run_crosscheck(args, work: Path, policies: list[str]) -> dict:
    """`tdaot-run bench` at batch 1, as the README quotes it, beside the C++ server's number."""
    out = {}
    if not Path(args.tdaot_run).exists():
        return out
    for policy in policies:
        command = [
            args.tdaot_run,
            "bench",
            str(work / "artifacts" / policy / "policy.pt2"),
            "--batch",
            "1",
            "--iters",
            "5000",
            "--threads",
            "1",
            "--json",
        ]
        result = subprocess.run(
            command, capture_output=True, text=True, env=base_env(), preexec_fn=pinned(args.cpu)
        )
        if result.returncode == 0:
            data = json.loads(result.stdout)
            out[policy] = {k: data[k] for k in ("p50_us", "p99_us", "p999_us", "max_us") if k in data}
    return out


def alternate_stage(args, work: Path, policies: list[str], timed: set[str]) -> list[dict]:
    """benchmarks/alternate.py in a fresh process, pinned: the throughput batches with every
    runtime in one process, one call each (separate processes disagree by more than the ratios
    the benchmark decides). Only where the run times the runtimes it compares."""
    batches = list(args.batches)  # batch 1 too: the bound run against the plain call (issue 37)
    if args.alternate_seconds <= 0 or not batches or not {"onnxruntime", "aoti", "tdaot"} <= timed:
        return []
    log(f"one process, one call each ({args.alternate_seconds:g} s per policy and batch)")
    out = work / "alternation.json"
    command = [
        args.python,
        str(HERE / "alternate.py"),
        "--artifacts",
        str(work / "artifacts"),
        "--policies",
        ",".join(policies),
        "--batches",
        ",".join(map(str, batches)),
        "--seconds",
        str(args.alternate_seconds),
        "--cpu",
        str(-1 if args.cpu is None else args.cpu),
        "--json",
        str(out),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=base_env())
    if result.returncode != 0:
        log(f"alternate.py failed: {result.stderr.strip()[-400:]}")
        return []
    return json.loads(out.read_text())


def lite_crosscheck(args, work: Path, policies: list[str], repeats: int = 3) -> dict:
    """`tdaot-run bench --bind` and `tdaot-lite bench` at batch 1, alternated `repeats` times per
    policy (same CPU pin, the allocation counter preloaded): the lite row's check through the
    command-line tools. Per tool: the p50 of every repeat, and the median repeat's summary."""
    out = {}
    tools = {"full": Path(args.tdaot_run), "lite": Path(args.tdaot_lite)}
    if not all(tool.exists() for tool in tools.values()):
        return out
    env = base_env()
    counter = alloc_counter(args)
    if counter is not None:
        env["LD_PRELOAD"] = str(counter)
    for policy in policies:
        package = str(work / "artifacts" / policy / "policy.pt2")
        commands = {
            "full": [str(tools["full"]), "bench", package, "--batch", "1", "--bind", "--threads", "1"],
            "lite": [str(tools["lite"]), "bench", package, "--batch", "1"],
        }
        runs: dict[str, list[dict]] = {"full": [], "lite": []}
        for index in range(repeats):
            order = ("full", "lite") if index % 2 == 0 else ("lite", "full")
            for which in order:
                result = subprocess.run(
                    [*commands[which], "--iters", "5000", "--warmup", "500", "--json"],
                    capture_output=True,
                    text=True,
                    env=env,
                    preexec_fn=pinned(args.cpu),
                )
                if result.returncode != 0:
                    runs[which].append({"error": (result.stderr.strip() or "failed")[-300:]})
                    continue
                text = result.stdout  # tdaot-run prints indented JSON, tdaot-lite one line
                runs[which].append(json.JSONDecoder().raw_decode(text[text.index("{") :])[0])
        entry = {}
        for which, done in runs.items():
            good = sorted((r for r in done if "error" not in r), key=lambda r: r["p50_us"])
            if not good:
                entry[which] = {"error": done[0]["error"] if done else "not run"}
                continue
            median = good[len(good) // 2]
            entry[which] = {
                k: median.get(k) for k in ("p50_us", "p99_us", "p999_us", "max_us", "allocations_per_call")
            }
            entry[which]["p50_us_runs"] = [r["p50_us"] for r in done if "error" not in r]
        out[policy] = entry
        log(f"  cross-check {policy}: " + ", ".join(f"{w} {e.get('p50_us')}" for w, e in entry.items()))
    return out


if __name__ == "__main__":
    sys.exit(main())
