"""The linear-layer kernels alone (issue 42): ATen's `F.linear` (MKL sgemm on these wheels)
against oneDNN with the weight prepacked (`mkldnn._linear_pointwise` on
`_reorder_linear_weight`, the kernels OpenVINO uses), per product shape, one thread, one process,
one call of each per turn in a fresh random order (alternate.py), outputs compared first. Prints
the CPU and its vector ISA beside the figures: which kernel wins depends on both.

    .venv/bin/python benchmarks/linear_kernels.py [--seconds 2] [--shapes 64x235x256,...]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from alternate import alternate  # the one-process stage's random-order loop (same directory)
from common import cpu_description

SHAPES = "64x235x256,256x512x512,64x1024x1024,64x48x256,4096x256x256"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="per shape")
    parser.add_argument("--shapes", default=SHAPES, help="MxKxN products, comma-separated")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(cpu_description())
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, batch_size=m)
        calls = {
            "aten": lambda x=x, w=w, b=b: F.linear(x, w, b),
            "onednn": lambda x=x, p=packed, b=b: torch.ops.mkldnn._linear_pointwise(x, p, b, "none", [], ""),
        }
        torch.testing.assert_close(calls["onednn"](), calls["aten"](), rtol=1e-4, atol=1e-4)
        times = alternate(calls, args.seconds)
        p50 = {name: statistics.median(t) for name, t in times.items()}
        flops = {name: 2 * m * k * n / t for name, t in p50.items()}  # p50 in ns: FLOP/ns = GFLOP/s
        print(
            f"{shape:>14}: aten {flops['aten']:.0f} GFLOP/s, onednn {flops['onednn']:.0f} GFLOP/s, "
            f"p50 onednn / aten {p50['onednn'] / p50['aten']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
