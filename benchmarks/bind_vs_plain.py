"""A bound run beside the plain call, in one process: `bind(batch).run()` against
`run_positional` of the same inputs on the same Policy (tdaot._C), alternating in rounds so
that both see the same machine state. Prints the p50 and p90 of each, in microseconds, and
their ratio (issue 37, item 3: a binding must never be the slower way to run).

Usage: python benchmarks/bind_vs_plain.py PACKAGE [--batch 64] [--rounds 20] [--calls 500]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tdaot import _C


def timed(call, calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1e3)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("package")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = _C.Policy(args.package, intra_op_threads=1)
    binding = policy.bind(args.batch)
    inputs = [torch.randn_like(t) if t.is_floating_point() else t.clone() for t in binding.inputs]
    for bound, given in zip(binding.inputs, inputs):
        bound.copy_(given)
    plain = lambda: policy.run_positional(inputs)  # noqa: E731
    bound = binding.run
    timed(plain, args.calls)  # warm both
    timed(bound, args.calls)
    results: dict[str, list[float]] = {"plain": [], "bound": []}
    for turn in range(args.rounds):
        order = (
            (("plain", plain), ("bound", bound)) if turn % 2 == 0 else (("bound", bound), ("plain", plain))
        )
        for name, call in order:
            results[name] += timed(call, args.calls)
    p50 = {name: statistics.median(s) for name, s in results.items()}
    p90 = {name: statistics.quantiles(s, n=10)[-1] for name, s in results.items()}
    path = "allocation-free" if binding.allocation_free else "runner"
    print(f"batch {args.batch} model {binding.model} ({path})")
    for name in results:
        print(f"  {name:6s} p50 {p50[name]:8.2f} us   p90 {p90[name]:8.2f} us")
    print(f"  bound/plain p50 ratio {p50['bound'] / p50['plain']:.3f}")


if __name__ == "__main__":
    main()
