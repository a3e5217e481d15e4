"""Tuning a network: each distinct layer program once, into the tuning database.

    results = lt.onnx.tune("resnet18.onnx", budget_s=600)
    model = lt.onnx.compile("resnet18.onnx")      # its layers now compile with the tuned schedules

Layers are grouped by the database's program key (structure, shapes, dtypes): ResNet-18's
twenty layers are a dozen distinct programs, each searched once. Layers without a reduction
(copies, element-wise chains) keep their default schedule. The budget is shared among the
programs in proportion to their FLOPs, with a floor so that small layers are tried at all.
"""
from __future__ import annotations

from dataclasses import dataclass

MIN_SHARE_S = 2.0


@dataclass
class LayerTuning:
    layers: list          # the names of the layers sharing this program
    result: object        # loopstack.tune.api.TuneResult, or None when the search could not run


def tune_model(model, budget_s: float = 60, mapper: str = "scripted", cost_model: str = "measure", target=None,
               input_shapes=None, progress=None) -> list[LayerTuning]:
    from ..frontend.run import program
    from ..tune.api import tune
    from ..tune.db import program_key
    from .graph import NetGraph, load

    net = model if isinstance(model, NetGraph) else load(model, input_shapes=input_shapes, target=target)
    groups: dict = {}
    for L in net.layers:
        g = program(L.tensor).graph
        if not any(g.reduced(n) for n in g.nodes):
            continue
        groups.setdefault(program_key(g), []).append(L)
    if not groups:
        return []
    from ..looptree.stats import flops

    weights = {}
    for key, layers in groups.items():
        weights[key] = max(flops(layers[0].tensor.loop_tree.lower()), 1)
    total = sum(weights.values())
    out = []
    for key, layers in groups.items():
        share = max(budget_s * weights[key] / total, MIN_SHARE_S)
        if progress is not None:
            progress(f"tuning {layers[0].name} ({len(layers)} layer{'s' if len(layers) > 1 else ''}) for {share:.0f} s")
        try:
            res = tune(layers[0].tensor, budget_s=share, mapper=mapper, cost_model=cost_model, target=target,
                       name=layers[0].name)
        except Exception as e:   # noqa: BLE001 - one layer the tuner cannot search must not stop the rest
            if progress is not None:
                progress(f"  not tuned: {type(e).__name__}: {e}")
            out.append(LayerTuning([L.name for L in layers], None))
            continue
        out.append(LayerTuning([L.name for L in layers], res))
    return out
