"""benchmarks/peers.py: OpenVINO and ExecuTorch built from one ExportedProgram and checked against
eager, and a peer that cannot run a policy reported as a row, not a gap (issue 42).

The peers are installed by `make bench` only (they are large); their own tests skip without them,
saying so. The error path runs everywhere.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import alternate  # noqa: E402
import peers  # noqa: E402
from policies import timed_batches  # noqa: E402

SPECS = [{"key": "observation", "dtype": "float32", "shape": [4]}]


def _tiny(tmp_path: Path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ELU(), nn.Linear(8, 3)).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(net, (torch.randn(2, 4),), dynamic_shapes=({0: batch},))
    cases = []
    for rows in (1,):
        inputs = [torch.randn(rows, 4)]
        with torch.no_grad():
            cases.append({"inputs": inputs, "outputs": [net(*inputs)]})
    return program, cases


@pytest.mark.parametrize("peer", peers.PEERS)
def test_peer_matches_eager(tmp_path, peer):
    pytest.importorskip(peer, reason=f"{peer} is installed by `make bench` only")
    program, cases = _tiny(tmp_path)
    status = peers.build_all(program, SPECS, [1], tmp_path, cases, only=(peer,))
    assert "error" not in status[peer], status[peer]
    assert status[peer]["max_abs_error"] < 1e-5
    assert json.loads((tmp_path / "peers.json").read_text())[peer] == status[peer]


def test_a_peer_that_fails_is_a_row_saying_why(tmp_path, monkeypatch):
    program, cases = _tiny(tmp_path)

    def lacks_an_op(*args, **kwargs):
        raise NotImplementedError("aten.lstm: no kernel")

    monkeypatch.setattr(peers, "build_openvino", lacks_an_op)
    monkeypatch.setattr(peers, "build_executorch", lacks_an_op)
    status = peers.build_all(program, SPECS, [1], tmp_path, cases)
    assert status == {name: {"error": "NotImplementedError: aten.lstm: no kernel"} for name in peers.PEERS}
    assert peers.read_status(tmp_path) == status

    row = {
        "policy": "lstm",
        "batch": 64,
        "calls": 10,
        "p50_us": {"onnxruntime": 5.0, "aoti": 6.0, "tdaot": 4.0, "tdaot (copy)": 4.0},
        "copy/tdaot": {"p50": 1.0, "min": 1.0, "max": 1.0},
        "tdaot/onnxruntime": {"p50": 0.8, "min": 0.8, "max": 0.8},
        "not_timed": {name: status[name]["error"] for name in peers.PEERS},
    }
    table = "\n".join(alternate.table([row]))
    assert "lstm at 64, openvino: NotImplementedError: aten.lstm: no kernel" in table
    assert "| not run | not run |" in table


def test_pixel_networks_are_timed_at_1_and_64():
    assert timed_batches("nature") == timed_batches("impala") == (1, 64)
    assert timed_batches("mlp") == (1, 64, 256, 4096)


def test_the_height_map_and_wide_policies_are_timed_at_every_batch():
    """Issue 54: a convolution and a wide-layer policy in make bench's set, at 1-4096 rows."""
    from policies import BATCHES, DESCRIPTIONS, POLICIES

    assert set(DESCRIPTIONS) == set(POLICIES)
    for name, actions in (("heightmap", 12), ("wide_mlp", 24)):
        assert timed_batches(name) == BATCHES
        policy, example = POLICIES[name]()
        with torch.no_grad():
            assert policy(example)["action"].shape == (example.batch_size[0], actions)


def test_the_peak_fraction_table_has_every_runtime_at_the_largest_batch():
    import flops

    results = {
        "context": {"fma_peak": [{"gflops": 100.0, "isa": "avx512"}]},
        "policies": {"wide_mlp": {"flops_per_sample": 2e6}},
        "alternation": [
            {"policy": "wide_mlp", "batch": 64, "p50_us": {"tdaot": 1.0}},
            {"policy": "wide_mlp", "batch": 4096, "p50_us": {"onnxruntime": 200e3, "tdaot": 100e3}},
        ],
    }
    lines = flops.peak_fraction_table(results)
    # 2 MFLOP x 4096 rows in 100 ms = 81.9 GFLOP/s: 82 % of 100; ONNX Runtime half of that.
    assert "| wide_mlp | 2.00 M | 41 % | – | – | – | 82 % |" in lines
    assert not any("| 64 |" in line for line in lines)
