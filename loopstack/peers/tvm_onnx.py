"""An ONNX model built by Apache TVM's Relax frontend, untuned, for the nets bench.

The issue's comparison: how long TVM takes from the file to the first result, and how fast its
untuned code runs (no MetaSchedule database: what `tvm.compile` gives a user who does not tune).
The target is LLVM for this host's CPU (`-mcpu` from LLVM's own host detection); one thread
(`TVM_NUM_THREADS=1`, set before TVM starts its pool).

    run = tvm_relax(model_proto); outputs = run({"input": x})   # {name: numpy array}
"""
from __future__ import annotations

import os

import numpy as np


def tvm_relax(model):
    """A function running ONNX `model` compiled by TVM Relax (untuned, LLVM, one thread)."""
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
              if i.name not in {t.name for t in model.graph.initializer}}
    mod = from_onnx(model, shape_dict=shapes, keep_params_in_input=False)
    mod = relax.transform.DecomposeOpsForInference()(mod)
    mcpu = tvm.target.codegen.llvm_get_system_cpu()
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 1})
    with target:
        mod = relax.get_pipeline("zero")(mod)
    exe = tvm.compile(mod, target=target)
    vm = relax.VirtualMachine(exe, tvm.cpu())
    names = list(shapes)
    outputs = [o.name for o in model.graph.output]

    def run(feeds: dict) -> dict:
        args = [tvm.runtime.tensor(np.ascontiguousarray(feeds[n])) for n in names]
        out = vm["main"](*args)
        outs = list(out) if isinstance(out, (list, tuple)) or type(out).__name__ == "Array" else [out]
        return {name: o.numpy() for name, o in zip(outputs, outs)}
    return run
