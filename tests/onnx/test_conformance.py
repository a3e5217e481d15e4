"""ONNX's own node cases: never a wrong answer or a crash; the listed fp32 operators pass."""
import collections

import pytest

from conformance import LISTED, QUANTIZED, node_cases, run_all, table

# cases of the listed operators that need what the import does not offer, with the reason
KNOWN_UNSUPPORTED = {
    "test_batchnorm_example_training_mode": "training mode",
    "test_batchnorm_epsilon_training_mode": "training mode",
    "test_center_crop_pad_crop_expanded": "an int64 run-time input computed into a shape",
    "test_center_crop_pad_pad_expanded": "an int64 run-time input computed into a shape",
    "test_center_crop_pad_crop_and_pad_expanded": "an int64 run-time input computed into a shape",
    "test_reduce_max_empty_set": "empty tensors",
    "test_reduce_sum_empty_set": "empty tensors",
    "test_reduce_sum_empty_set_non_reduced_axis_zero": "empty tensors",
    "test_reduce_sum_square_empty_set_expanded": "empty tensors",
    "test_reshape_allowzero_reordered": "empty tensors",
    "test_slice_start_out_of_bounds": "empty tensors",
    "test_split_zero_size_splits_opset13": "empty tensors",
    "test_split_zero_size_splits_opset18": "empty tensors",
}


@pytest.fixture(scope="module")
def outcomes():
    res = run_all(node_cases())
    print("\n" + table(res))
    return res


def test_no_case_fails(outcomes):
    failed = [f"{o.name}: {o.detail}" for o in outcomes if o.status == "failed"]
    assert not failed, "\n".join(failed)


def test_listed_operators_pass(outcomes):
    listed = [o for o in outcomes if o.ops <= LISTED and o.float32]
    assert len(listed) > 200
    missing = [f"{o.name}: {o.detail}" for o in listed
               if o.status != "passed" and o.name not in KNOWN_UNSUPPORTED]
    assert not missing, "\n".join(missing)


def test_unsupported_cases_name_what_is_missing(outcomes):
    reasons = collections.Counter()
    for o in outcomes:
        if o.status == "unsupported":
            assert o.detail, o.name
            assert any(w in o.detail for w in ("not supported", "Unsupported", "must be", "only", "training",
                                               "empty", "non-contiguous", "Slice:", "Pad mode", "auto_pad",
                                               "Cast", "exponent")), f"{o.name}: {o.detail}"
            reasons[o.detail.split(": ")[-1]] += 1
    assert reasons


def test_each_operator_of_the_list_has_passing_cases(outcomes):
    passed_ops = set()
    for o in outcomes:
        if o.status == "passed":
            passed_ops |= o.ops
    # Constant and Identity appear only inside other cases; Shape-driven subgraphs via Shape
    assert LISTED - passed_ops <= {"Constant"}, sorted(LISTED - passed_ops)


# the int8 operators' cases that pass: every one whose tensors are 8-bit integers
QUANTIZED_PASSING = {
    "test_convinteger_with_padding", "test_convinteger_without_padding", "test_dequantizelinear",
    "test_dequantizelinear_axis", "test_dequantizelinear_blocked", "test_matmulinteger", "test_qlinearconv",
    "test_qlinearmatmul_2D_int8_float16", "test_qlinearmatmul_2D_int8_float32", "test_qlinearmatmul_2D_uint8_float16",
    "test_qlinearmatmul_2D_uint8_float32", "test_qlinearmatmul_3D_int8_float16", "test_qlinearmatmul_3D_int8_float32",
    "test_qlinearmatmul_3D_uint8_float16", "test_qlinearmatmul_3D_uint8_float32", "test_quantizelinear",
    "test_quantizelinear_axis", "test_quantizelinear_blocked_asymmetric",
}


def test_int8_operators_pass_or_name_the_dtype(outcomes):
    quant = {o.name: o for o in outcomes if o.ops & QUANTIZED}
    assert QUANTIZED_PASSING <= set(quant), sorted(QUANTIZED_PASSING - set(quant))
    wrong = [f"{n}: {quant[n].status} {quant[n].detail}" for n in sorted(QUANTIZED_PASSING)
             if quant[n].status != "passed"]
    assert not wrong, "\n".join(wrong)
    for o in quant.values():
        if o.name not in QUANTIZED_PASSING and o.status == "unsupported":
            # float8, int4/int2, float4, int16/uint16 tensors, or an operator outside the list (Round)
            assert "dtype" in o.detail or "operator" in o.detail, f"{o.name}: {o.detail}"
