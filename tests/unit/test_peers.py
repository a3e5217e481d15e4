"""The benchmark's peers that are handed a graph of their own (onnxruntime, XNNPACK through LiteRT)
compute each workload kind exactly as numpy does before they are timed."""
import numpy as np
import pytest

from loopstack import peers
from loopstack.workloads import get_workload

GRAPH_PEERS = ("onnxruntime", "xnnpack")
# one workload of every kind, and both convolution paddings (SAME, and stride 2 padded explicitly)
WORKLOADS = ("MM-64", "MLP-8x256", "CONV-4", "DWCONV-1", "DWCONV-4", "MBV3-C64")


@pytest.mark.parametrize("peer", GRAPH_PEERS)
@pytest.mark.parametrize("name", WORKLOADS)
def test_graph_peers_compute_the_workload(peer, name):
    if not peers.available(peer):
        pytest.skip(f"{peer} is not installed (pip install -e '.[test]' installs it)")
    w = get_workload(name)
    prepared = peers.prepare(peer, w, w.arrays(3))       # raises PeerSkipped when it differs from numpy
    assert prepared.result is not None and prepared.compile_ms is not None
    result = peers.measure(peer, w, w.arrays(3), runs=1)
    assert np.isfinite(result.gflops) and result.gflops > 0


@pytest.mark.parametrize("peer", GRAPH_PEERS)
def test_a_peer_that_computes_something_else_is_skipped_with_the_error(peer, monkeypatch):
    if not peers.available(peer):
        pytest.skip(f"{peer} is not installed")
    from loopstack.peers import numpy_peer

    w = get_workload("MM-64")
    monkeypatch.setattr(numpy_peer, "reference", lambda w, a: np.ones((64, 64), np.float32) * 1e3)
    with pytest.raises(peers.PeerSkipped, match="different result"):
        peers.prepare(peer, w, w.arrays(0))


def test_unknown_and_missing_peers_are_named(monkeypatch):
    w = get_workload("MM-64")
    with pytest.raises(peers.PeerSkipped, match="unknown peer 'tvm'"):
        peers.measure("tvm", w, w.arrays(0))
    monkeypatch.setattr(peers, "available", lambda name: False)
    with pytest.raises(peers.PeerSkipped, match="xnnpack is not installed"):
        peers.measure("xnnpack", w, w.arrays(0))
