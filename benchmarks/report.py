"""Tables and plot of a benchmark results file (written by benchmarks/run.py).

.venv/bin/python benchmarks/report.py benchmarks/results/DATE-HOST.json   # re-renders .md and .png
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import alternate
import flops
from common import fmt_time_us


def stats(ns: list[int], batch: int) -> dict:
    """Nearest-rank percentiles in µs, and throughput in samples/s over the timed calls."""
    ordered = sorted(ns)

    def at(q: float) -> float:
        rank = max(1, math.ceil(q * len(ordered)))
        return ordered[rank - 1] / 1e3

    return {
        "n": len(ordered),
        "p50_us": at(0.5),
        "p99_us": at(0.99),
        "p999_us": at(0.999),
        "max_us": ordered[-1] / 1e3,
        "samples_per_s": batch * len(ordered) / (sum(ordered) / 1e9),
    }


def fmt_rate(per_s: float | None) -> str:
    if per_s is None:
        return "–"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if per_s >= scale:
            return f"{per_s / scale:.2f}{unit}/s"
    return f"{per_s:.0f}/s"


def ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return ""
    return f" ({value / base:.2f}x)"


def _timing_index(results: dict) -> dict:
    return {(t["runtime"], t["policy"], t["batch"]): t for t in results["timing"]}


def markdown(results: dict) -> str:
    ctx = results["context"]
    native = results["native"]
    labels = results["runtimes"]
    timing = _timing_index(results)
    v = ctx["versions"]
    lines = [
        f"# tdaot benchmark, {ctx['date']}",
        "",
        f"Host `{ctx['host']}`: {ctx['cpu']}, {ctx['cores']} cores; every timed process pinned to CPU "
        f"{ctx['pinned_cpu']}, one intra-op thread. torch {v['torch']}, tensordict {v['tensordict']}, "
        f"onnxruntime {v['onnxruntime']}, onnx {v['onnx']}; tdaot at `{ctx['git']}`.",
        f"Command: `{ctx['command']}`; {ctx['rounds']} rounds, runtimes rotated each round; "
        f"chunk per round (calls, min calls, time budget): "
        + ", ".join(
            f"batch {b}: {c['iters']}, {c['min_iters']}, {c['max_seconds']} s"
            for b, c in ctx["chunks"].items()
        )
        + ".",
        f"Load average (1/5/15 min): {ctx['load_average_start']} at start, "
        f"{ctx['load_average_rounds_start']} when the timing rounds began, "
        f"{ctx['load_average_rounds_end']} at their end. "
        f"Whole run {ctx['total_seconds']:.0f} s (builds {ctx['build_seconds']:.0f} s).",
        "",
        f"Ratios in parentheses are against **{labels[native]}** for the same policy and batch "
        "(latency and time: above 1 is slower than tdaot native; throughput: above 1 is faster).",
        "allocs/call: malloc-family calls per call in steady state, C++ rows, counted by a counter "
        "preloaded into the server process (difference between N and 2N calls, over N).",
        "n is the number of timed calls pooled over the rounds; p99.9 of fewer than 1000 calls is "
        "close to the max.",
        "",
    ]
    lines += summary_tables(results)
    lines += flops.roofline_table(results)
    lines += alternate.table(results.get("alternation") or [])
    lines += flops.peak_fraction_table(results)
    lines += lite_tables(results)
    for policy, info in results["policies"].items():
        lines += [f"## {policy}: {info['description']}", ""]
        lines += [
            "| batch | runtime | n | p50 | p99 | p99.9 | max | throughput | allocs/call |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for batch in sorted({t["batch"] for t in results["timing"] if t["policy"] == policy}):
            base = timing.get((native, policy, batch), {})
            for runtime, label in labels.items():
                t = timing.get((runtime, policy, batch))
                if t is None:
                    continue
                cells = [
                    fmt_time_us(t[k]) + ratio(t[k], base.get(k))
                    for k in ("p50_us", "p99_us", "p999_us", "max_us")
                ]
                rate = fmt_rate(t["samples_per_s"]) + ratio(t["samples_per_s"], base.get("samples_per_s"))
                name = f"**{label}**" if runtime == native else label
                allocs = t.get("allocs_per_call")
                counted = "–" if allocs is None else f"{allocs:g}"
                lines.append(
                    f"| {batch} | {name} | {t['n']} | " + " | ".join(cells) + f" | {rate} | {counted} |"
                )
        lines += [""]
        lines += [
            "| runtime | load | first call (batch 1) | load + first call | peak RSS "
            "| max abs error vs eager |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        startup = results["startup"][policy]
        base = startup.get(native, {})
        base_total = (base.get("load_s") or 0) + (base.get("first_call_s") or 0)
        for runtime, label in labels.items():
            s = startup.get(runtime)
            if not s:
                continue
            if "error" in s and "load_s" not in s:
                lines.append(f"| {label} | failed: {s['error'][:80]} | | | | |")
                continue
            load_us = s.get("load_s", 0) * 1e6
            first_us = s.get("first_call_s", 0) * 1e6
            total = s.get("load_s", 0) + s.get("first_call_s", 0)
            rss = s.get("peak_rss_mib")
            err = s.get("parity_max_abs_error")
            lines.append(
                f"| {label} | {fmt_time_us(load_us)}{ratio(load_us, base.get('load_s', 0) * 1e6)} "
                f"| {fmt_time_us(first_us)}{ratio(first_us, base.get('first_call_s', 0) * 1e6)} "
                f"| {fmt_time_us(total * 1e6)}{ratio(total, base_total)} "
                f"| {f'{rss:.0f} MiB' if rss else '–'}{ratio(rss, base.get('peak_rss_mib'))} "
                f"| {'same file as the Python row' if err is None else f'{err:.1e}'} |"
            )
        lines += [""]

    lines += [
        "## Build time per artifact",
        "",
        "Each policy is built twice in fresh processes: cold (empty inductor cache) and cached (the "
        "cache the cold build left). Export: torch.export (tdaot's own, first in the process; the "
        "others share a second export of the same policy) plus, for TorchScript and ONNX, the "
        "trace or ONNX conversion. Compile: AOTInductor compile + package for tdaot, save for the "
        "ExportedProgram, freeze + save for TorchScript, the first calls for torch.compile. Ratios "
        "against the tdaot .pt2 row.",
        "",
        "| policy | artifact | export cold | export cached | compile cold | compile cached | size |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for policy, phases in results["builds"].items():
        cold, cached = phases["cold"], phases.get("cached", {})
        base = cold.get("tdaot .pt2", {})
        base_cached = cached.get("tdaot .pt2", {})
        for artifact, row in cold.items():
            if not isinstance(row, dict):
                continue
            again = cached.get(artifact, {})

            def cell(value, base_value):
                return "–" if value is None else f"{value:.2f} s{ratio(value, base_value)}"

            size = row.get("bytes")
            lines.append(
                f"| {policy} | {artifact} | {cell(row.get('export_s'), base.get('export_s'))} "
                f"| {cell(again.get('export_s'), base_cached.get('export_s'))} "
                f"| {cell(row.get('compile_s'), base.get('compile_s'))} "
                f"| {cell(again.get('compile_s'), base_cached.get('compile_s'))} "
                f"| {'–' if not size else f'{size / 2**20:.2f} MiB'} |"
            )
    lines += [""]
    if results.get("tdaot_run_crosscheck"):
        lines += [
            "`tdaot-run bench --batch 1 --iters 5000 --threads 1` (same CPU pin), p50 / p99 µs: "
            + "; ".join(
                f"{p} {c['p50_us']:.1f} / {c['p99_us']:.1f}"
                for p, c in results["tdaot_run_crosscheck"].items()
            ),
            "",
        ]
    if results.get("skipped"):
        reasons: dict[str, list[str]] = {}
        for combo, reason in results["skipped"].items():
            reasons.setdefault(str(reason)[:160], []).append(combo)
        lines += ["Not timed:", ""]
        lines += [
            f"- {', '.join(sorted(set(c.rsplit('/', 1)[0] for c in combos)))}: {reason}"
            for reason, combos in reasons.items()
        ]
        lines += [""]
    return "\n".join(lines)


LITE, FULL_BOUND = "tdaot-lite-bound", "tdaot-bound"


def lite_tables(results: dict) -> list[str]:
    """The lite runtime beside the full runtime's bound run at batch 1 (the rounds, then the
    command-line tools), and the footprint table."""
    timing = _timing_index(results)
    labels = results["runtimes"]
    lines: list[str] = []
    rows = [
        (p, timing[FULL_BOUND, p, 1], timing[LITE, p, 1])
        for p in results["policies"]
        if (FULL_BOUND, p, 1) in timing and (LITE, p, 1) in timing
    ]
    if rows:
        lines += [
            f"## {labels[LITE]} vs {labels[FULL_BOUND]}, batch 1",
            "",
            "The same package (policy.pt2) and the same batch-1 model, bound once, each call `run()` "
            "alone; the lite runtime in a process with no libtorch. Timed in the same rounds, rotated "
            "with every other runtime. Ratio: lite / full (goal: p50 <= 1.05x, 0 allocations per call).",
            "",
            "| policy | full p50 | full p99 | full p99.9 | lite p50 | lite p99 | lite p99.9 "
            "| p50 ratio | p99 ratio | allocs/call full, lite |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for policy, full, lite in rows:

            def allocs(t):
                return "–" if t.get("allocs_per_call") is None else f"{t['allocs_per_call']:g}"

            lines.append(
                f"| {policy} | "
                + " | ".join(fmt_time_us(full[k]) for k in ("p50_us", "p99_us", "p999_us"))
                + " | "
                + " | ".join(fmt_time_us(lite[k]) for k in ("p50_us", "p99_us", "p999_us"))
                + f" | {lite['p50_us'] / full['p50_us']:.3f}x | {lite['p99_us'] / full['p99_us']:.3f}x"
                f" | {allocs(full)}, {allocs(lite)} |"
            )
        lines += [""]
    check = results.get("lite_crosscheck") or {}
    if check:
        lines += [
            "Through the tools: `tdaot-run bench PKG --batch 1 --bind --threads 1` and `tdaot-lite bench "
            "PKG --batch 1`, 5000 calls after 500 untimed, alternated 3 times per policy (same CPU pin, "
            "allocation counter preloaded); the median run's numbers, and every run's p50.",
            "",
            "| policy | full p50 | full p99 | lite p50 | lite p99 | p50 ratio | allocs/call full, lite "
            "| full p50 runs | lite p50 runs |",
            "|---|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for policy, entry in check.items():
            full, lite = entry.get("full", {}), entry.get("lite", {})
            if "error" in full or "error" in lite:
                lines.append(f"| {policy} | {(full.get('error') or lite.get('error'))[:120]} | | | | | | | |")
                continue

            def count(e):
                return "–" if e.get("allocations_per_call") is None else f"{e['allocations_per_call']:g}"

            lines.append(
                f"| {policy} | {fmt_time_us(full['p50_us'])} | {fmt_time_us(full['p99_us'])} "
                f"| {fmt_time_us(lite['p50_us'])} | {fmt_time_us(lite['p99_us'])} "
                f"| {lite['p50_us'] / full['p50_us']:.3f}x | {count(full)}, {count(lite)} "
                f"| {', '.join(f'{v:.2f}' for v in full['p50_us_runs'])} "
                f"| {', '.join(f'{v:.2f}' for v in lite['p50_us_runs'])} |"
            )
        lines += [""]
    lines += footprint_table(results)
    return lines


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "–"
    if n >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**10:.0f} KiB"


def footprint_table(results: dict) -> list[str]:
    fp = results.get("footprint")
    if not fp:
        return []
    ctx = results["context"]
    lines = [
        f"## Footprint: {fp.get('policy', '')} package ({fmt_bytes(fp['package_bytes'])}; "
        f"ONNX file {fmt_bytes(fp['onnx_bytes'])})",
        "",
        "On disk: the runtime's file and every shared library it loads (ldd closure, each file "
        "once) beyond glibc (libc, libm, libdl, libpthread, librt, ld-linux), libstdc++ and libgcc_s; "
        "the package is not counted. maxrss: the process's peak resident set (ru_maxrss, read by "
        "benchmarks/cpp/maxrss.c) after "
        f"loading the package and {fp['steps']} calls at batch 1. Start: wall time from spawning the "
        "process to its first line of output, printed after its first call (median and min of "
        f"{fp['starts']} starts, the commands interleaved, after one untimed round), and the CPU "
        "time (user + sys, median) of those runs to their exit, less inflated by a loaded machine "
        "than wall time. The ONNX Runtime "
        "numbers are from a Python harness (benchmarks/footprint.py ort-child): its rss and start "
        "include the interpreter and numpy, shown alone in the last row. Goals (issue 25): lite on "
        "disk <= 10 MB; robot_service maxrss <= 15 MB, start to first action <= 20 ms.",
        f"Load average at the start of this part: {ctx.get('load_average_footprint_start', '–')}.",
        "",
        "| runtime | on disk | maxrss after steps | start to first output (median, min) "
        "| CPU time of a start | measured with |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in fp["rows"].values():
        size = row.get("disk", {}).get("bytes")
        rss = row.get("maxrss_kib")
        start = row.get("start_median_s")
        start_text = "–" if start is None else f"{start * 1e3:.1f} ms, {row['start_min_s'] * 1e3:.1f} ms"
        if start is not None and row.get("start_measure") != "to first output":
            start_text += f" ({row['start_measure']})"
        cpu = row.get("start_cpu_median_s")
        cpu_text = "–" if cpu is None else f"{cpu * 1e3:.1f} ms"
        used = "; ".join(f"`{row[k]}`" for k in ("rss_command", "start_command") if row.get(k))
        if row.get("error"):
            used += f" (error: {row['error'][:100]})"
        lines.append(
            f"| {row['label']} | {fmt_bytes(size)} | {'–' if rss is None else fmt_bytes(rss * 1024)} "
            f"| {start_text} | {cpu_text} | {used or '–'} |"
        )
    lines += ["", "Files counted on disk:", ""]
    for row in fp["rows"].values():
        files = row.get("disk", {}).get("files")
        if files:
            lines.append(
                f"- {row['label']}: " + ", ".join(f"{f['name']} {fmt_bytes(f['bytes'])}" for f in files)
            )
    lite = fp["rows"].get("lite", {})
    if "torch_mapped" in lite:
        lines += [
            "",
            "The lite process (`tdaot-lite run`) maps "
            + (
                "no libtorch or c10"
                if not lite["torch_mapped"]
                else "**" + ", ".join(lite["torch_mapped"]) + "**"
            )
            + "; its shared libraries beyond the C/C++ runtime: "
            + ", ".join(lite.get("mapped_libraries", []))
            + ".",
        ]
    lines += [""]
    return lines


def summary_tables(results: dict) -> list[str]:
    """p50 per runtime (rows) and policy (columns) at each batch size, ratio to tdaot native:
    the README's table."""
    timing = _timing_index(results)
    native = results["native"]
    policies = list(results["policies"])
    lines = []
    for batch in sorted({t["batch"] for t in results["timing"]}):
        lines += [
            f"## Summary: batch {batch}, p50 (ratio to {results['runtimes'][native]})",
            "",
            "| runtime | " + " | ".join(policies) + " |",
            "|---|" + "---:|" * len(policies),
        ]
        for runtime, label in results["runtimes"].items():
            cells = []
            for policy in policies:
                t = timing.get((runtime, policy, batch))
                base = timing.get((native, policy, batch))
                if t is None:
                    cells.append("–")
                elif runtime == native or base is None:
                    cells.append(fmt_time_us(t["p50_us"]))
                else:
                    cells.append(f"{fmt_time_us(t['p50_us'])} ({t['p50_us'] / base['p50_us']:.2f}x)")
            name = f"**{label}**" if runtime == native else label
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += [""]
    return lines


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timing = _timing_index(results)
    policies = list(results["policies"])
    labels = results["runtimes"]
    runtimes = list(labels)
    colors = list(plt.get_cmap("tab20")(range(len(runtimes))))
    if results["native"] in runtimes:
        colors[runtimes.index(results["native"])] = (0, 0, 0, 1)  # tdaot native stands out
    fig, axes = plt.subplots(2, len(policies), figsize=(6 * len(policies), 11), squeeze=False)
    for col, policy in enumerate(policies):
        ax = axes[0][col]
        rows = [(r, timing[r, policy, 1]) for r in runtimes if (r, policy, 1) in timing]
        ys = range(len(rows))
        ax.barh(ys, [t["p50_us"] for _, t in rows], color=[colors[runtimes.index(r)] for r, _ in rows])
        ax.scatter(
            [t["p99_us"] for _, t in rows], ys, marker="|", color="black", s=120, label="p99", zorder=3
        )
        ax.scatter(
            [t["p999_us"] for _, t in rows], ys, marker="x", color="red", s=30, label="p99.9", zorder=3
        )
        ax.scatter([t["max_us"] for _, t in rows], ys, marker=".", color="gray", s=30, label="max", zorder=3)
        ax.set_yticks(list(ys), [labels[r] for r, _ in rows] if col == 0 else [""] * len(rows))
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("latency at batch 1, µs (bar: p50)")
        ax.set_title(policy)
        ax.grid(axis="x", which="both", alpha=0.3)
        if col == 0:
            ax.legend(loc="lower right", fontsize=8)
        ax = axes[1][col]
        for runtime in runtimes:
            points = sorted(
                (b, t["samples_per_s"]) for (r, p, b), t in timing.items() if r == runtime and p == policy
            )
            if points:
                ax.plot(
                    *zip(*points),
                    marker="o",
                    color=colors[runtimes.index(runtime)],
                    label=labels[runtime],
                    linewidth=2.5 if runtime == results["native"] else 1.2,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("samples / s")
        ax.grid(which="both", alpha=0.3)
    handles, names = axes[1][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=4, fontsize=9)
    ctx = results["context"]
    fig.suptitle(f"tdaot vs alternatives, {ctx['date']}, {ctx['host']} ({ctx['cpu']}), 1 thread, pinned")
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> int:
    path = Path(sys.argv[1])
    results = json.loads(path.read_text())
    path.with_suffix(".md").write_text(markdown(results))
    plot(results, path.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
