"""ONNX's node test cases (shipped in the onnx wheel) run through loopstack's ONNX backend.

Each case ends as passed (every output within the case's rtol/atol and of its dtype),
unsupported (UnsupportedError naming what is missing) or failed (a wrong answer, a wrong
dtype or shape, or any other exception). `python3 tests/onnx/conformance.py` prints the table.
"""
from __future__ import annotations

import collections
import sys
import time
from dataclasses import dataclass

import numpy as np

# the operators the import promises in fp32: their cases should pass, not be unsupported
LISTED = {
    "Conv", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "LeakyRelu", "Clip", "Sigmoid",
    "HardSigmoid", "HardSwish", "Tanh", "Erf", "Gelu", "Exp", "Sqrt", "Reciprocal", "Softmax", "LogSoftmax",
    "BatchNormalization", "LayerNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean",
    "ReduceSum", "ReduceMax", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
    "Slice", "Pad", "Identity", "Constant", "Shape",
}

# the int8 operators (QLinear*, *Integer, Quantize/DequantizeLinear): their 8-bit cases should pass;
# the others name the dtype they use (float8, int4, int16, ...)
QUANTIZED = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger"}


@dataclass
class Outcome:
    name: str
    status: str        # "passed" | "unsupported" | "failed"
    detail: str
    ops: frozenset
    float32: bool      # every input and output is a float32 (or constant-slot) tensor


def _float32_case(case) -> bool:
    for inputs, outputs in case.data_sets:
        for a in list(inputs) + list(outputs):
            if not isinstance(a, np.ndarray):
                return False
        if any(o.dtype != np.float32 for o in outputs):
            return False
    return True


def run_case(case) -> Outcome:
    from loopstack.errors import UnsupportedError
    from loopstack.onnx import backend

    ops = frozenset(n.op_type for n in case.model.graph.node)
    f32 = _float32_case(case)
    try:
        rep = backend.prepare(case.model)
        for inputs, outputs in case.data_sets:
            got = rep.run(inputs)
            if len(got) != len(outputs):
                raise AssertionError(f"{len(got)} outputs, expected {len(outputs)}")
            for g, want in zip(got, outputs):
                g, want = np.asarray(g), np.asarray(want)
                if g.dtype != want.dtype or g.shape != want.shape:
                    raise AssertionError(f"output {g.dtype}{g.shape}, expected {want.dtype}{want.shape}")
                np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)
        return Outcome(case.name, "passed", "", ops, f32)
    except UnsupportedError as e:
        return Outcome(case.name, "unsupported", str(e), ops, f32)
    except Exception as e:   # noqa: BLE001 - every other outcome is a failure to report
        return Outcome(case.name, "failed", f"{type(e).__name__}: {str(e)[:400]}", ops, f32)


def node_cases():
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np_err = np.seterr(all="ignore")
        try:
            return [c for c in collect_testcases() if c.kind == "node"]
        finally:
            np.seterr(**np_err)


def run_all(cases=None) -> list[Outcome]:
    return [run_case(c) for c in (node_cases() if cases is None else cases)]


def table(outcomes) -> str:
    counts = collections.Counter(o.status for o in outcomes)
    lines = [f"ONNX node conformance: {len(outcomes)} cases: {counts['passed']} passed, "
             f"{counts['unsupported']} unsupported, {counts['failed']} failed"]
    listed = [o for o in outcomes if o.ops <= LISTED and o.float32]
    lc = collections.Counter(o.status for o in listed)
    lines.append(f"  cases of the listed fp32 operators only: {len(listed)}: {lc['passed']} passed, "
                 f"{lc['unsupported']} unsupported, {lc['failed']} failed")
    quant = [o for o in outcomes if o.ops & QUANTIZED]
    qc = collections.Counter(o.status for o in quant)
    lines.append(f"  cases of the int8 operators: {len(quant)}: {qc['passed']} passed, "
                 f"{qc['unsupported']} unsupported, {qc['failed']} failed")
    for o in outcomes:
        if o.status == "failed":
            lines.append(f"  FAILED {o.name}: {o.detail}")
    return "\n".join(lines)


if __name__ == "__main__":
    t0 = time.perf_counter()
    res = run_all()
    print(table(res))
    if "-v" in sys.argv:
        for o in res:
            if o.status == "unsupported" and (o.ops <= LISTED and o.float32 or o.ops & QUANTIZED):
                print(f"  unsupported {o.name}: {o.detail}")
    print(f"{time.perf_counter() - t0:.1f} s")
