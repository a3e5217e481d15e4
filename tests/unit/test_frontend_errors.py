"""User errors name what is wrong; each message is pinned here."""
import numpy as np
import pytest

import loopstack as lt


def test_shape_mismatch_on_set():
    m, n = lt.symbols("m n")
    with pytest.raises(lt.ShapeError, match=r"set: array of shape \(3, 3\) does not match the tensor's shape \(64, 32\)"):
        lt.Tensor(64, 32).set(np.zeros((3, 3), np.float32))
    with pytest.raises(lt.ShapeError, match="to: the tensor has 2 dimensions"):
        lt.Tensor(np.zeros((2, 3), np.float32)).to(m)


def test_unsatisfiable_sizes():
    i = lt.Symbol("i")
    a = lt.Tensor(np.zeros(3, np.float32)).to(i)
    b = lt.Tensor(np.zeros(4, np.float32)).to(i)
    with pytest.raises(lt.ShapeError, match=r"size of \w+ is [34] \(.*\) but [34] \(.*\): unsatisfiable sizes"):
        (a + b).numpy(target="interp")


def test_unknown_size():
    k = lt.Symbol("k")
    with pytest.raises(lt.ShapeError, match="cannot infer the size of k"):
        lt.Tensor(k).sum(k).shape


def test_unknown_symbol():
    m, n, k = lt.symbols("m n k")
    A = lt.Tensor(np.zeros((2, 3), np.float32)).to(m, n)
    with pytest.raises(lt.SymbolError, match=r"sum: k is not a dimension of this tensor \(its dimensions: m, n\)"):
        A.sum(k)
    with pytest.raises(lt.SymbolError, match="transpose: .* is not a permutation"):
        A.transpose(m, k)
    C = lt.Tensor(m, k)
    with pytest.raises(lt.SymbolError, match="k is on the left but does not appear on the right"):
        C[m, k] = A[m, n]


def test_dtype_mismatch():
    i = lt.Symbol("i")
    a = lt.Tensor(np.zeros(3, np.float32)).to(i)
    b = lt.Tensor(np.zeros(3, np.int32)).to(i)
    with pytest.raises(lt.DTypeError, match="different dtypes"):
        (a + b).numpy(target="interp")


def test_missing_data_and_wrong_schedule():
    i = lt.Symbol("i")
    Z = lt.Tensor(4).to(i) * 2.0
    with pytest.raises(lt.ArgumentError, match="has no data"):
        Z.numpy(target="interp")
    other = (lt.Tensor(np.zeros(4, np.float32)).to(i) + 1.0).loop_tree
    with pytest.raises(lt.ScheduleError, match="schedules a different program"):
        Z.set(other)
    with pytest.raises(lt.ScheduleError, match="not a loopstack tree"):
        lt.deserialize("{}")
