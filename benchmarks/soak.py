"""Soak (`make soak`): a million calls at batch 1 per package, with the resident set sampled
throughout; the RSS must not grow by more than 1 MiB after the warm-up.

For each package (by default the tutorial and the recurrent policy of examples/policies.py,
built into build/soak/ unless a package there is newer than the examples and readable by
tdaot-run) it runs, each in a fresh process:

- native: `tdaot-run soak PKG --json` (run_positional, or a tdaot::Session for a recurrent
  package), the path a robot's control loop takes;
- python: the bindings, `tdaot.load(PKG)` called with a TensorDict (`session.step(td)` for a
  recurrent package), RSS read from /proc/self/statm at the same evenly spaced calls;
- python-positional: `native.run_positional(*tensors)`, for packages that are not recurrent.

Each process makes --calls calls on fixed random inputs; the first tenth is warm-up. Growth is
the RSS at the end minus the RSS at the end of the warm-up. Writes
benchmarks/results/<date>-<host>-soak.json and .md and prints the table; exits 1 when a run
grew by more than --max-growth-kib (or failed).

    .venv/bin/python benchmarks/soak.py --tdaot-run build/cpp/tdaot-run [--calls 1000000]
    .venv/bin/python benchmarks/soak.py --package mine=path/to/policy.pt2   # your own artifact
"""

from __future__ import annotations

import argparse
import array
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
POLICIES = ROOT / "examples" / "policies.py"
EXAMPLES = {"tutorial": "tutorial_policy", "recurrent": "recurrent_policy"}
# One intra-op thread everywhere, as in `make bench`: a control loop's setting.
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def log(message: str) -> None:
    print(f"[soak] {message}", file=sys.stderr, flush=True)


# --- the Python-binding soak, run in its own process (--worker) ----------------------------


def _mallinfo2():
    """glibc's mallinfo2, or None (another libc, or glibc before 2.33)."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
        ]

    try:
        function = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = MallInfo2
    return function


MALLINFO2 = _mallinfo2()


READINGS = ("rss_kib", "file_kib", "heap_kib", "py_blocks")


def current_rss() -> tuple[int, int, int, int]:
    """This process's resident set and its file-backed part (/proc/self/statm), the bytes held
    from malloc (glibc's count, -1 elsewhere) in KiB, and the Python objects' memory blocks
    (sys.getallocatedblocks): RSS growing while those two do not is allocator caching."""
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        fields = os.read(fd, 256).split()
    finally:
        os.close(fd)
    page_kib = os.sysconf("SC_PAGESIZE") // 1024
    heap = -1
    if MALLINFO2 is not None:
        info = MALLINFO2()
        heap = (info.uordblks + info.hblkhd) // 1024
    return int(fields[1]) * page_kib, int(fields[2]) * page_kib, heap, sys.getallocatedblocks()


def sample_points(calls: int, samples: int, warmup: int) -> list[int]:
    """The calls before which the RSS is read: calls * k / samples for k = 0..samples, and the
    end of the warm-up (the same points as `tdaot-run soak`)."""
    return sorted({warmup, *(calls * k // samples for k in range(samples + 1))})


def percentile(ordered, p: float) -> float:
    """Nearest-rank percentile of sorted values."""
    rank = min(max(int(-(-p * len(ordered) // 1)), 1), len(ordered))
    return ordered[rank - 1]


def summarize(
    *,
    package: str,
    mode: str,
    batch: int,
    calls: int,
    warmup: int,
    seconds: float,
    samples: list[dict],
    latencies_ns,
    max_growth_kib: int,
) -> dict:
    """The result record, with the same fields as `tdaot-run soak --json`."""
    warm_index = next(i for i, s in enumerate(samples) if s["call"] == warmup)
    warm, last = samples[warm_index], samples[-1]
    after = samples[warm_index:]
    growth = last["rss_kib"] - warm["rss_kib"]
    n = len(after)
    xs = [s["call"] / 1e6 for s in after]
    ys = [s["rss_kib"] for s in after]
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sxx if n >= 2 and sxx else 0.0
    ordered = sorted(latencies_ns)
    return {
        "package": package,
        "mode": mode,
        "batch": batch,
        "calls": calls,
        "warmup_calls": warmup,
        "seconds": seconds,
        "calls_per_s": calls / seconds,
        "rss_start_kib": samples[0]["rss_kib"],
        "rss_warmup_kib": warm["rss_kib"],
        "rss_max_kib": max(s["rss_kib"] for s in after),
        "rss_final_kib": last["rss_kib"],
        "growth_kib": growth,
        "file_growth_kib": last["file_kib"] - warm["file_kib"],
        "heap_growth_kib": None if last["heap_kib"] is None else last["heap_kib"] - warm["heap_kib"],
        "py_blocks_growth": last["py_blocks"] - warm["py_blocks"],
        "slope_kib_per_million_calls": slope,
        "max_growth_kib": max_growth_kib,
        "passed": growth <= max_growth_kib,
        "latency_us": {
            "p50": percentile(ordered, 0.5) / 1e3,
            "p99": percentile(ordered, 0.99) / 1e3,
            "p999": percentile(ordered, 0.999) / 1e3,
            "max": ordered[-1] / 1e3,
            "mean": sum(ordered) / len(ordered) / 1e3,
        },
        "samples": samples,
    }


def python_soak(args: argparse.Namespace) -> dict:
    """--calls calls of the bindings in this process; the record `summarize` makes."""
    import torch
    from tensordict import TensorDict

    import tdaot
    from tdaot import keys as keyutil

    torch.manual_seed(args.seed)
    native = tdaot.load(args.worker, intra_op_threads=1)
    manifest = native.manifest
    recurrent = manifest.recurrent is not None
    specs = {spec.key: spec for spec in manifest.inputs}

    def random_input(key: str) -> torch.Tensor:
        spec = specs[key]
        shape = (args.batch, *spec.shape)
        dtype = getattr(torch, spec.dtype) if isinstance(spec.dtype, str) else spec.dtype
        if dtype == torch.bool:
            return torch.randint(0, 2, shape).to(dtype)
        if not dtype.is_floating_point:
            return torch.randint(0, 10, shape, dtype=dtype)
        return torch.randn(shape, dtype=dtype)

    if args.path == "positional":
        if recurrent:
            raise SystemExit("--path positional: the package is recurrent; use --path td")
        tensors = [random_input(key) for key in manifest.input_keys]
        mode = "run_positional"

        def call():
            native.run_positional(*tensors)

    else:
        session = native.session(args.batch) if recurrent else None
        keys = session.input_keys if session else manifest.input_keys
        td = TensorDict(
            {keyutil.td_key(keyutil.from_manifest(key)): random_input(key) for key in keys},
            batch_size=[args.batch],
        )
        mode = "session.step(td)" if session else "native(td)"
        call = (lambda: session.step(td)) if session else (lambda: native(td))

    calls, warmup = args.calls, args.warmup_calls if args.warmup_calls is not None else args.calls // 10
    points = sample_points(calls, args.samples, warmup)
    # Arrays allocated and written through before the first call, so that the bookkeeping
    # itself grows neither the RSS nor the Python block count being measured (a list of ints
    # would, by 36 bytes a call; a dict per RSS reading, by 7 blocks).
    latencies = array.array("q", bytes(8 * (calls - warmup)))
    times = array.array("q", bytes(8 * len(points)))
    readings = [array.array("q", bytes(8 * len(points))) for _ in READINGS]
    clock = time.perf_counter_ns

    def read(index: int) -> None:
        times[index] = clock() - start
        for values, value in zip(readings, current_rss()):
            values[index] = value

    start = clock()
    next_point = 0
    for i in range(calls):
        if i == points[next_point]:
            read(next_point)
            next_point += 1
        t0 = clock()
        call()
        elapsed = clock() - t0
        if i >= warmup:
            latencies[i - warmup] = elapsed
    read(next_point)  # the last point: `calls`
    seconds = times[-1] / 1e9
    samples = [
        {
            "call": call_index,
            "seconds": times[k] / 1e9,
            **{name: values[k] for name, values in zip(READINGS, readings)},
        }
        for k, call_index in enumerate(points)
    ]
    for sample in samples:
        if sample["heap_kib"] < 0:
            sample["heap_kib"] = None
    return summarize(
        package=args.worker,
        mode=mode,
        batch=args.batch,
        calls=calls,
        warmup=warmup,
        seconds=seconds,
        samples=samples,
        latencies_ns=latencies,
        max_growth_kib=args.max_growth_kib,
    )


# --- the driver ----------------------------------------------------------------------------


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, text=True, capture_output=True, **kwargs)


def ensure_package(name: str, directory: Path, tdaot_run: str, rebuild: bool) -> Path:
    """build/soak/NAME.pt2 from examples/policies.py, rebuilt when missing, older than the
    examples, unreadable by this tdaot-run (an older manifest schema), or with --rebuild."""
    path = directory / f"{name}.pt2"
    fresh = (
        not rebuild
        and path.exists()
        and path.stat().st_mtime > POLICIES.stat().st_mtime
        and run([tdaot_run, "inspect", str(path)]).returncode == 0
    )
    if fresh:
        log(f"reusing {path.relative_to(ROOT)}")
        return path
    directory.mkdir(parents=True, exist_ok=True)
    log(f"building {path.relative_to(ROOT)} from examples/policies.py:{EXAMPLES[name]}")
    command = [sys.executable, "-m", "tdaot", "build", f"{POLICIES}:{EXAMPLES[name]}", "-o", str(path)]
    done = run(command)
    if done.returncode != 0:
        raise SystemExit(f"soak: building {name} failed:\n{done.stdout}{done.stderr}")
    return path


def last_error(text: str, code: int) -> str:
    """The exception line of a Python traceback (the first unindented line after it: a
    message may run over several lines), else the last line."""
    lines = text.strip().splitlines()
    if "Traceback (most recent call last):" in lines:
        after = lines[len(lines) - lines[::-1].index("Traceback (most recent call last):") :]
        unindented = [line for line in after if line and not line[0].isspace()]
        if unindented:
            return unindented[0]
    return lines[-1] if lines else f"exit {code}"


def soak_process(runner: str, command: list[str]) -> dict:
    """Runs one soak process; its JSON record, with the runner, command and exit code added.
    A process that printed no record gets an ``error``: its last line on stderr (a Python
    worker's full traceback is logged)."""
    log(f"{runner}: {' '.join(command)}")
    done = run(command, env={**os.environ, **THREAD_ENV})
    try:
        record = json.loads(done.stdout)
    except json.JSONDecodeError:
        if done.stderr.strip():
            log(done.stderr.rstrip())
        record = {"passed": False, "error": last_error(done.stderr or done.stdout, done.returncode)}
    if done.returncode == 3:  # tdaot-run soak: growth over the limit; its message says by how much
        record["message"] = done.stderr.strip()
    record.update(runner=runner, command=" ".join(command), exit_code=done.returncode)
    return record


def git_commit() -> str:
    head = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip() or "unknown"
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"]).stdout.strip()
    return head + ("+changes" if dirty else "")


def kib(value) -> str:
    return "–" if value is None else f"{value:,} KiB"


def signed_kib(value) -> str:
    return "–" if value is None else f"{value:+,} KiB"


def table(results: list[dict]) -> str:
    lines = [
        "| package | runner | calls | time | calls/s | RSS warm-up | RSS max | RSS final | growth | "
        "heap Δ | p50 | p99 | p99.9 | max | result |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        if "error" in r:
            cells = " | " * 12
            lines.append(f"| {r['name']} | {r['runner']}{cells}error: {r['error'][:160]} |")
            continue
        lat = r["latency_us"]
        verdict = "pass" if r["passed"] else "**FAIL**"
        lines.append(
            f"| {r['name']} | {r['runner']}: {r['mode']} | {r['calls']:,} | {r['seconds']:.1f} s | "
            f"{r['calls_per_s'] / 1e3:.0f}k | {kib(r['rss_warmup_kib'])} | {kib(r['rss_max_kib'])} | "
            f"{kib(r['rss_final_kib'])} | {signed_kib(r['growth_kib'])} | "
            f"{signed_kib(r.get('heap_growth_kib'))} | {lat['p50']:.1f} µs | "
            f"{lat['p99']:.1f} µs | {lat['p999']:.1f} µs | {lat['max']:.0f} µs | "
            f"{verdict} (≤ {r['max_growth_kib']} KiB) |"
        )
    return "\n".join(lines)


def markdown(context: dict, results: list[dict]) -> str:
    return "\n".join(
        [
            f"# tdaot soak, {context['date']}",
            "",
            f"Host `{context['host']}`: {context['cpu']}, {context['cores']} cores; one intra-op thread. "
            f"torch {context['torch']}; tdaot at `{context['commit']}`.",
            f"Command: `{context['command']}`.",
            f"Each run is a fresh process making {context['calls']:,} calls at batch {context['batch']} on "
            "fixed random inputs; the first tenth is warm-up. RSS (/proc/self/statm) is read at "
            f"{context['samples'] + 1} evenly spaced calls and at the end of the warm-up; growth is "
            "the final RSS minus the RSS at the end of the warm-up, and must be at most "
            f"{context['max_growth_kib']} KiB; heap Δ is the same difference in the bytes held "
            "from malloc (glibc's mallinfo2), which tells a leak (both grow) from the allocator "
            "keeping freed pages (only the RSS grows). Latency percentiles are over the calls "
            "after the warm-up, each timed on its own; calls/s is over the whole run, sampling "
            "and timing included. The JSON file holds every RSS reading.",
            f"Load average (1/5/15 min): {context['load_start']} at start, {context['load_end']} at the end.",
            "",
            table(results),
            "",
        ]
    )


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tdaot-run", default=str(ROOT / "build" / "cpp" / "tdaot-run"))
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=100, help="RSS readings at evenly spaced calls (+1)")
    parser.add_argument("--warmup-calls", type=int, help="default: a tenth of --calls")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--max-growth-kib", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--package",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="soak this package instead of the examples (repeatable)",
    )
    parser.add_argument(
        "--packages-dir", default=str(ROOT / "build" / "soak"), help="where the examples are built"
    )
    parser.add_argument("--rebuild", action="store_true", help="rebuild the example packages")
    parser.add_argument(
        "--runners",
        default="native,python,python-positional",
        help="comma-separated subset of native, python, python-positional",
    )
    parser.add_argument("--results-dir", default=str(HERE / "results"))
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    # Internal: one Python-binding soak of this package in this process, JSON on stdout.
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", choices=("td", "positional"), default="td", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.samples < 1 or args.batch < 1:
        parser.error("--calls, --samples and --batch must be positive")
    if args.warmup_calls is not None and not 0 <= args.warmup_calls < args.calls:
        parser.error("--warmup-calls must be at least 0 and less than --calls")

    if args.worker:
        print(json.dumps(python_soak(args)))
        return 0

    runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    unknown = set(runners) - {"native", "python", "python-positional"}
    if unknown:
        parser.error(f"unknown runner(s): {', '.join(sorted(unknown))}")
    if "native" in runners and not os.access(args.tdaot_run, os.X_OK):
        parser.error(f"{args.tdaot_run} is not an executable; build it with `make cpp`")

    started = datetime.datetime.now(datetime.UTC)
    load_start = [round(x, 2) for x in os.getloadavg()]
    if args.package:
        packages = {}
        for item in args.package:
            name, sep, path = item.partition("=")
            if not sep:
                name, path = Path(item).stem, item
            packages[name] = Path(path).resolve()
    else:
        packages = {
            name: ensure_package(name, Path(args.packages_dir), args.tdaot_run, args.rebuild)
            for name in EXAMPLES
        }

    common = ["--calls", str(args.calls), "--samples", str(args.samples), "--batch", str(args.batch)]
    common += ["--max-growth-kib", str(args.max_growth_kib), "--seed", str(args.seed)]
    if args.warmup_calls is not None:
        common += ["--warmup-calls", str(args.warmup_calls)]
    worker = [sys.executable, str(Path(__file__).resolve()), *common, "--worker"]
    results = []
    for name, path in packages.items():
        recurrent = '"recurrent"' in run([args.tdaot_run, "inspect", str(path), "--json"]).stdout
        for runner in runners:
            if runner == "native":
                command = [args.tdaot_run, "soak", str(path), "--json", *common]
            elif runner == "python":
                command = [*worker, str(path), "--path", "td"]
            elif recurrent:
                continue  # tdaot.Session has no public positional step
            else:
                command = [*worker, str(path), "--path", "positional"]
            record = soak_process(runner, command)
            record["name"] = name
            results.append(record)
            if "error" in record:
                log(f"{name} {runner}: error: {record['error']}")
            else:
                log(
                    f"{name} {runner}: {record['calls_per_s']:.0f} calls/s, RSS growth "
                    f"{record['growth_kib']:+d} KiB ({'pass' if record['passed'] else 'FAIL'})"
                )

    import torch

    context = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "host": socket.gethostname(),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "commit": git_commit(),
        "command": os.environ.get(
            "SOAK_COMMAND", "benchmarks/soak.py " + " ".join(argv or sys.argv[1:])
        ).strip(),
        "calls": args.calls,
        "batch": args.batch,
        "samples": args.samples,
        "max_growth_kib": args.max_growth_kib,
        "load_start": load_start,
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "packages": {name: str(path) for name, path in packages.items()},
    }
    print(table(results))
    if not args.no_write:
        results_dir = Path(args.results_dir)
        results_dir.mkdir(parents=True, exist_ok=True)
        stem = results_dir / f"{started.strftime('%Y-%m-%d')}-{context['host']}-soak"
        stem.with_suffix(".json").write_text(
            json.dumps({"context": context, "results": results}, indent=1) + "\n"
        )
        stem.with_suffix(".md").write_text(markdown(context, results))
        print(f"\nwrote {stem}.json and .md")
    failed = [f"{r['name']} {r['runner']}" for r in results if not r.get("passed")]
    if failed:
        print(
            f"soak: over {args.max_growth_kib} KiB of growth or failed: {', '.join(failed)}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
