"""Every DSL op and nn function against numpy, on every available backend."""
import numpy as np
import pytest

import loopstack as lt


def _targets():
    out = ["interp"]
    try:
        import loopstack.backend.x86.compile  # noqa: F401

        out.append("x86")
    except ImportError as e:
        print(f"x86 backend skipped: {e}")
    return out


@pytest.fixture(params=_targets())
def target(request):
    return request.param


def run(t, target):
    try:
        return t.numpy(target=target)
    except lt.UnsupportedError as e:
        pytest.skip(f"{target}: {e}")


rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(a, b, tol=1e-4):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_matmul_both_forms(target):
    a, b = r(7, 5), r(5, 3)
    m, n, k = lt.symbols("m n k")
    A, B = lt.Tensor(a), lt.Tensor(b)
    close(run((A.to(m, k) * B.to(k, n)).sum(k), target), a @ b)
    C = lt.Tensor(m, n)
    C[m, n] = A[m, k] * B[k, n]
    close(run(C, target), a @ b)
    close(run(lt.einsum("mk,kn->mn", A, B), target), a @ b)
    assert C.shape == (7, 3)
    assert C.symbolic_shape == (m, n)


def test_einstein_accumulate(target):
    a, b, c = r(4, 5), r(5, 6), r(4, 6)
    m, n, k = lt.symbols("m n k")
    A, B, C = lt.Tensor(a), lt.Tensor(b), lt.Tensor(c)
    C[m, n] += A[m, k] * B[k, n]
    close(run(C, target), c + a @ b)


def test_paper_fig2_declared_shapes(target):
    m, n, k = lt.Var("m"), lt.Var("n"), lt.Var("k")
    A = lt.Tensor([m, k])
    B = lt.Tensor([k])
    a, b = r(3, 4), r(4)
    A.set(a)
    B.set(b)
    C = lt.Tensor(m)
    C[m] = A[m, k] * B[k]
    close(run(C, target), a @ b)


def test_elementwise_and_broadcast(target):
    x, y = r(4, 6), r(6)
    i, j = lt.symbols("i j")
    X, Y = lt.Tensor(x).to(i, j), lt.Tensor(y).to(j)
    close(run(X + Y, target), x + y)
    close(run(X - Y, target), x - y)
    close(run(X * Y, target), x * y)
    close(run(X / (Y.abs() + 1.0), target), x / (np.abs(y) + 1))
    close(run(X.max(Y), target), np.maximum(x, y))
    close(run(X.min(Y), target), np.minimum(x, y))
    close(run(-X, target), -x)
    close(run(lt.exp(X), target), np.exp(x), 1e-3)
    close(run(lt.log(X.abs() + 1.0), target), np.log(np.abs(x) + 1), 1e-3)
    close(run(lt.sqrt(X.abs()), target), np.sqrt(np.abs(x)), 1e-3)
    close(run(lt.reciprocal(X.abs() + 1.0), target), 1 / (np.abs(x) + 1), 1e-3)
    close(run(lt.neg(X) * 2.0 + 1.0, target), -x * 2 + 1)


def test_reductions(target):
    x = r(5, 7)
    i, j = lt.symbols("i j")
    X = lt.Tensor(x).to(i, j)
    close(run(X.sum(j), target), x.sum(1))
    close(run(X.sum(i, j), target), x.sum())
    close(run((X.abs() * 0.5 + 0.8).prod(i), target), (np.abs(x) * 0.5 + 0.8).prod(0), 1e-3)
    close(run(X.max_reduce(i), target), x.max(0))
    close(run(X.min_reduce(j), target), x.min(1))


def test_transpose_pad_concat(target):
    x, y = r(3, 4), r(3, 2)
    i, j, k = lt.symbols("i j k")
    X, Y = lt.Tensor(x).to(i, j), lt.Tensor(y).to(i, k)
    close(run(X.transpose(j, i), target), x.T)
    close(run(X.pad(j, 1, 2), target), np.pad(x, ((0, 0), (1, 2))))
    close(run(X.pad(i, 1), target), np.pad(x, ((1, 1), (0, 0))))
    close(run(X | Y, target), np.concatenate([x, y], 1))
    close(run(lt.nn.pad(X, (i, 1), (j, (0, 1))), target), np.pad(x, ((1, 1), (0, 1))))


def test_flatten(target):
    x = r(2, 3, 4)
    a, b, c = lt.symbols("a b c")
    X = lt.Tensor(x).to(a, b, c)
    close(run((X * 2.0).flatten(b, c), target), (x * 2).reshape(2, 12))


def test_views_window_and_index(target):
    x = r(10)
    s = lt.SymbolGenerator()
    X = lt.Tensor(x).to(s.N)
    wv = r(3)
    W = lt.Tensor(wv).to(s.K)
    Y = (X.to(s.No, s.K, constraints=[(s.N, s.No + s.K)]) * W).sum(s.K)
    close(run(Y, target), np.convolve(x, wv[::-1], "valid"))
    Z = (X[s.No + s.K] * W).sum(s.K)
    close(run(Z, target), np.convolve(x, wv[::-1], "valid"))


def _conv_ref(x, w, stride=1, pad=0, dilation=1):
    # x [c, h, w], w [o, c, kh, kw] -> [o, ho, wo]
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    o, c, kh, kw = w.shape
    ho = (x.shape[1] - dilation * (kh - 1) - 1) // stride + 1
    wo = (x.shape[2] - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((o, ho, wo), np.float32)
    for a in range(kh):
        for b in range(kw):
            patch = x[:, a * dilation: a * dilation + stride * (ho - 1) + 1: stride,
                      b * dilation: b * dilation + stride * (wo - 1) + 1: stride]
            out += np.einsum("oc,chw->ohw", w[:, :, a, b], patch)
    return out


@pytest.mark.parametrize("stride,pad,dilation", [(1, 0, 1), (2, 1, 1), (1, 1, 2)])
def test_conv(target, stride, pad, dilation):
    x, w = r(3, 9, 8), r(4, 3, 3, 3)
    s = lt.SymbolGenerator()
    X = lt.Tensor(x).to(s.c, s.h, s.w)
    if pad:
        X = lt.nn.pad(X, (s.h, pad), (s.w, pad))
        sp = X.symbolic_shape[1:]
    else:
        sp = (s.h, s.w)
    W = lt.Tensor(w).to(s.o, s.c, s.kh, s.kw)
    Y = lt.nn.conv(X, W, sp, (s.kh, s.kw), stride=stride, dilation=dilation)
    assert Y.symbolic_shape[-1] is s.o
    close(run(Y, target), _conv_ref(x, w, stride, pad, dilation).transpose(1, 2, 0), 1e-3)


def test_depthwise_conv_and_maxpool(target):
    x, w = r(3, 8, 8), r(3, 3, 3)
    s = lt.SymbolGenerator()
    X = lt.Tensor(x).to(s.c, s.h, s.w)
    W = lt.Tensor(w).to(s.c, s.kh, s.kw)
    Y = lt.nn.conv(X, W, (s.h, s.w), (s.kh, s.kw), channel_reduce=False)
    ref = np.stack([_conv_ref(x[i:i + 1], w[i][None, None])[0] for i in range(3)])
    close(run(Y, target), ref, 1e-3)
    s2 = lt.SymbolGenerator()
    X2 = lt.Tensor(x).to(s2.c, s2.h, s2.w)
    K = lt.Tensor(2, 2).to(s2.kh, s2.kw)  # sizes the window
    del K
    kh, kw = lt.symbols("kh kw")
    P = lt.nn.maxpool(X2, (s2.h, s2.w), (kh, kw), stride=2)
    # the window size comes from a declared tensor on the window symbols
    dummy = lt.Tensor(kh, kw)
    dummy.set(np.zeros((2, 2), np.float32))
    P = P + (dummy * 0.0).sum(kh, kw)
    ref = x.reshape(3, 4, 2, 4, 2).max(axis=(2, 4))
    close(run(P, target), ref)


def test_mlp_softmax_and_activations(target):
    x, w1, b1, w2 = r(4, 8), r(8, 16), r(16), r(16, 5)
    s = lt.SymbolGenerator()
    X = lt.Tensor(x).to(s.b, s.i)
    W1 = lt.Tensor(w1).to(s.i, s.h)
    B1 = lt.Tensor(b1).to(s.h)
    W2 = lt.Tensor(w2).to(s.h, s.o)
    H = lt.nn.relu(lt.nn.linear(X, W1, B1))
    Y = lt.nn.softmax(lt.nn.linear(H, W2), s.o)
    h = np.maximum(x @ w1 + b1, 0)
    z = h @ w2
    e = np.exp(z - z.max(1, keepdims=True))
    close(run(Y, target), e / e.sum(1, keepdims=True), 1e-3)
    v = r(6) * 4
    V = lt.Tensor(v)
    sig = 1 / (1 + np.exp(-v))
    close(run(lt.nn.sigmoid(V), target), sig, 1e-3)
    close(run(lt.nn.swish(V), target), v * sig, 1e-3)
    close(run(lt.nn.relu6(V), target), np.clip(v, 0, 6))
    close(run(lt.nn.hardswish(V), target), v * np.clip(v + 3, 0, 6) / 6, 1e-3)
    close(run(lt.nn.tanh(V), target), np.tanh(v), 1e-3)
    g = 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))
    close(run(lt.nn.gelu(V), target), g, 1e-3)


def test_mean_and_batch_norm(target):
    x = r(4, 6)
    s = lt.SymbolGenerator()
    X = lt.Tensor(x).to(s.n, s.c)
    close(run(lt.nn.mean(X, [s.n]), target), x.mean(0))
    mu, var, wt, bs = r(6), np.abs(r(6)) + 0.5, r(6), r(6)
    Y = lt.nn.batch_norm(X, lt.Tensor(mu).to(s.c), lt.Tensor(var).to(s.c), lt.Tensor(wt).to(s.c),
                         lt.Tensor(bs).to(s.c))
    close(run(Y, target), (x - mu) * wt / np.sqrt(var + 1e-5) + bs, 1e-3)


@pytest.mark.parametrize("dt", ["float32", "float16", "int32", "int8"])
def test_dtypes(target, dt):
    a = (rng.integers(-3, 4, (4, 5))).astype(dt)
    b = (rng.integers(-3, 4, (5, 3))).astype(dt)
    m, n, k = lt.symbols("m n k")
    C = (lt.Tensor(a).to(m, k) * lt.Tensor(b).to(k, n)).sum(k)
    got = run(C, target)
    want = a.astype(np.float64) @ b.astype(np.float64)
    close(got.astype(np.float64), want, 1e-2)


def test_size_inference_from_use(target):
    n = lt.Symbol("n")
    x = r(16)
    X = lt.Tensor(x)
    K = lt.Symbol("K")
    Z = lt.Tensor(K)
    W = (Z.to(n) * X.to(n)).sum(n)
    W.unify()
    assert Z.shape == (16,)
    z = r(16)
    Z.set(z)
    close(run(W, target), np.sum(x * z), 1e-3)


def test_lazy_and_cached(target):
    a, b = r(6, 4), r(4, 5)
    m, n, k = lt.symbols("m n k")
    C = (lt.Tensor(a).to(m, k) * lt.Tensor(b).to(k, n)).sum(k)
    k1 = C.compile(target)
    run(C, target)
    C2 = (lt.Tensor(r(6, 4)).to(m, k) * lt.Tensor(r(4, 5)).to(k, n)).sum(k)
    assert C2.compile(target) is k1   # same structure -> the cached kernel


def test_results_the_caller_keeps_are_never_overwritten(target):
    a, b, a2 = r(6, 4), r(4, 5), r(6, 4)
    m, n, k = lt.symbols("m n k")
    A = lt.Tensor(a)
    C = (A.to(m, k) * lt.Tensor(b).to(k, n)).sum(k)
    first = run(C, target)
    kept = first.copy()
    A.set(a2)                            # new data, same program: the next result differs
    second = run(C, target)
    assert second is not first
    np.testing.assert_array_equal(first, kept)
    close(second, a2 @ b)
    del first, second                    # dropped: the next call may reuse that memory
    close(run(C, target), a2 @ b)


@pytest.mark.parametrize("start, stride, pre, post", [(4, 1, 2, 2), (0, 2, 1, 1), (3, 2, 0, 4), (1, 1, 3, 0),
                                                     (2, 3, 2, 1)])
def test_a_pad_of_a_slice_is_zero_outside_the_slice(target, start, stride, pre, post):
    """A padded read is zero outside the buffer it reads; padding a slice, shift or stride of a
    buffer must give zeros outside the slice, not the buffer's other elements."""
    x = np.arange(1, 13, dtype=np.float32)
    a, m = lt.symbols("a m")
    X = lt.Tensor(x).to(a)
    got = run(X[stride * m + start].pad(m, pre, post), target)
    want = np.pad(x[start::stride], (pre, post))
    np.testing.assert_array_equal(got, want)
