"""Activation layouts of the throughput model's convolutions (issue 29), on three pixel networks:
the conv benchmark policy, the DQN "Nature" CNN (4 x 84 x 84) and an IMPALA ResNet (3 x 64 x 64).

Each network is built by tdaot three times, the throughput model's layout the only difference:

- ``default``: inductor's layout optimisation (on CPU: every convolution channels-last, so
  ATen's oneDNN convolution runs its brgemm kernels on NHWC);
- ``nchw``: ``layout_optimization`` off: every convolution NCHW (oneDNN's direct kernels on
  blocked nChw16c, a reorder in and out around each convolution);
- ``first-nchw``: ``layout_optimization`` off, and every convolution of more than 4 input
  channels handed a channels-last input: the first convolution (pixels) runs oneDNN's direct
  kernel that reads NCHW, the others brgemm as in the default.

All variants of a network are loaded in this one process and called in turn, one call each, in
a fresh random order every turn (benchmarks/alternate.py's loop: load from elsewhere on the
machine, and what ran just before a call, hit every variant alike).

    .venv/bin/python benchmarks/layouts.py [--nets bench,nature,impala] [--batches 64,256]
        [--variants default,nchw,first-nchw] [--seconds 20]

Nothing here is part of tdaot: the variants are made by patching tdaot's throughput options and
its program rewrite for the duration of a build.
"""

from __future__ import annotations

import os

os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

import tdaot  # noqa: E402
from alternate import alternate  # noqa: E402
from policies import ImpalaCNN, NatureCNN, _PixelEncoder  # noqa: E402
from tdaot.builder import pipeline, rewrites, tuning  # noqa: E402

NETS = {
    "bench": (_PixelEncoder, (3, 64, 64)),
    "nature": (NatureCNN, (4, 84, 84)),
    "impala": (ImpalaCNN, (3, 64, 64)),
}


def _first_conv_nchw(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """aten.conv2d with a channels-last input beyond the pixels (more than 4 channels)."""
    if x.shape[1] > 4:
        x = x.contiguous(memory_format=torch.channels_last)
    transposed, output_padding = False, (0, 0)
    return torch.ops.aten.convolution.default(
        x, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )


@contextlib.contextmanager
def layout(variant: str):
    """tdaot's throughput models built with ``variant``'s layout, for the duration."""
    if variant == "default":
        yield
        return
    options, tune = dict(tuning._OPTIONS["throughput"]), pipeline.tune_plan

    def tune_plan(program, plan):
        program = tune(program, plan)
        if plan.tuning == "throughput" and variant == "first-nchw":
            program = rewrites.apply(program, {torch.ops.aten.conv2d.default: _first_conv_nchw})
        return program

    tuning._OPTIONS["throughput"] = {**options, "layout_optimization": False}
    pipeline.tune_plan = tune_plan
    try:
        yield
    finally:
        tuning._OPTIONS["throughput"], pipeline.tune_plan = options, tune


def build(net: str, variant: str, out: Path) -> None:
    network, shape = NETS[net]
    torch.manual_seed(0)
    policy = TensorDictModule(network(), in_keys=["pixels"], out_keys=["action"])
    example = TensorDict({"pixels": torch.randint(0, 256, (4, *shape), dtype=torch.uint8)}, batch_size=[4])
    start = time.perf_counter()
    with layout(variant):
        tdaot.build(policy, example, out)
    print(f"built {net} {variant} in {time.perf_counter() - start:.1f} s", flush=True)


def compare(net: str, variants: list[str], batch: int, seconds: float, work: Path) -> None:
    models = [tdaot.load(work / f"{net}-{v}.pt2") for v in variants]
    pixels = torch.randint(0, 256, (batch, *NETS[net][1]), dtype=torch.uint8)
    reference = models[0](pixels=pixels)["action"]
    for variant, model in zip(variants, models):
        error = float((model(pixels=pixels)["action"] - reference).abs().max())
        assert error < 1e-3, f"{net} {variant}: max abs difference {error} from the default"
    calls = {variant: (lambda model=model: model(pixels=pixels)) for variant, model in zip(variants, models)}
    times = alternate(calls, seconds)  # ns per call
    base = statistics.median(times[variants[0]])
    for variant, t in times.items():
        p50 = statistics.median(t)
        row = f"{net:<8}{batch:>6}  {variant:<12}{p50 / 1e6:>10.3f} ms{p50 / base:>8.2f}x  (n={len(t)})"
        print(row, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nets", default="bench,nature,impala")
    parser.add_argument("--variants", default="default,nchw,first-nchw")
    parser.add_argument("--batches", default="64,256")
    parser.add_argument("--seconds", type=float, default=20.0, help="per net and batch")
    parser.add_argument("--work", default="", help="where the packages go (default: a temporary directory)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = args.variants.split(",")
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(args.work or temporary)
        work.mkdir(parents=True, exist_ok=True)
        for net in args.nets.split(","):
            for variant in variants:
                if not (work / f"{net}-{variant}.pt2").exists():
                    build(net, variant, work / f"{net}-{variant}.pt2")
            for batch in (int(b) for b in args.batches.split(",")):
                compare(net, variants, batch, args.seconds, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
