"""Data movement and shape arithmetic: Reshape, Transpose, Concat, Slice, Pad, Shape, ...

Each works on constants with numpy (so the Shape-driven subgraphs that exporters emit fold
at import) and on run-time values as DSL views: free renamings of axes where it can,
otherwise on a buffer read under another shape (Reshape, Flatten).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError, UnsupportedError
from ..registry import converter
from ..values import Dyn, broadcast, const_dyn, fresh, is_const, norm_axis, slice_axis
from .common import versions


def _ints(x, what) -> list[int]:
    if x is None:
        return None
    if not is_const(x):
        raise UnsupportedError(f"{what} must be a constant")
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _regroup(ctx, x: Dyn, shape) -> Dyn:
    """x under another shape of the same size: free when only unit axes change, else read
    from its buffer (row-major) under the new shape."""
    shape = tuple(int(s) for s in shape)
    if int(np.prod(shape)) != int(np.prod(x.shape)):
        raise ShapeError(f"cannot reshape {x.shape} into {shape}")
    if [s for s in shape if s != 1] == [s for s in x.shape if s != 1]:
        named = iter([d for d, s in zip(x.dims, x.shape) if s != 1])
        dims = [None if s == 1 else next(named) for s in shape]
        unit = [d for d, s in zip(x.dims, x.shape) if s == 1 and d is not None]
        t = x.t
        if unit:   # unit axes the expression still names: read them at 0
            t = t[tuple(0 if s in unit else s for s in t.symbolic_shape)]
        return Dyn(t, dims, shape, x.ops)
    x = ctx.materialize(x, layout=tuple(range(len(x.shape))))
    return ctx.placeholder(x.buffer, shape)


def _reshape_target(data_shape, shape, allowzero=0):
    out = list(shape)
    for i, s in enumerate(out):
        if s == 0 and not allowzero:
            if i >= len(data_shape):
                raise ShapeError(f"Reshape: 0 at position {i} copies a dimension the input lacks")
            out[i] = data_shape[i]
    if out.count(-1) > 1:
        raise ShapeError(f"Reshape: more than one -1 in {shape}")
    if -1 in out:
        rest = int(np.prod([s for s in out if s != -1]))
        total = int(np.prod(data_shape))
        if rest == 0 or total % rest:
            raise ShapeError(f"Reshape: cannot infer -1 in {shape} for {tuple(data_shape)}")
        out[out.index(-1)] = total // rest
    return out


@converter("Reshape", *versions("Reshape", 5), const=(1,))
def reshape(ctx, data, shape, *, allowzero=0):
    target = _reshape_target(data.shape, _ints(shape, "Reshape shape"), allowzero)
    if is_const(data):
        return data.reshape(target)
    return _regroup(ctx, data, target)


@converter("Flatten", *versions("Flatten", 1))
def flatten(ctx, input, *, axis=1):  # noqa: A002
    rank = len(input.shape)
    a = axis + rank if axis < 0 else axis
    if not 0 <= a <= rank:
        raise ShapeError(f"Flatten: axis {axis} is out of range for rank {rank}")
    target = (int(np.prod(input.shape[:a])), int(np.prod(input.shape[a:])))
    return input.reshape(target) if is_const(input) else _regroup(ctx, input, target)


def _squeeze(ctx, data, axes):
    rank = len(data.shape)
    axes = sorted(norm_axis(a, rank, "Squeeze") for a in axes) if axes is not None else \
        [i for i, s in enumerate(data.shape) if s == 1]
    for a in axes:
        if data.shape[a] != 1:
            raise ShapeError(f"Squeeze: axis {a} has size {data.shape[a]}, not 1")
    target = [s for i, s in enumerate(data.shape) if i not in axes]
    return data.reshape(target) if is_const(data) else _regroup(ctx, data, target)


def _unsqueeze(ctx, data, axes):
    rank = len(data.shape) + len(axes)
    axes = sorted(norm_axis(a, rank, "Unsqueeze") for a in axes)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"Unsqueeze: repeated axes {axes}")
    target, it = [], iter(data.shape)
    for i in range(rank):
        target.append(1 if i in axes else next(it))
    return data.reshape(target) if is_const(data) else _regroup(ctx, data, target)


@converter("Squeeze", 1, 11)
def squeeze_1(ctx, data, *, axes=None):
    return _squeeze(ctx, data, axes)


@converter("Squeeze", *versions("Squeeze", 13), const=(1,))
def squeeze(ctx, data, axes=None):
    return _squeeze(ctx, data, _ints(axes, "Squeeze axes"))


@converter("Unsqueeze", 1, 11)
def unsqueeze_1(ctx, data, *, axes):
    return _unsqueeze(ctx, data, axes)


@converter("Unsqueeze", *versions("Unsqueeze", 13), const=(1,))
def unsqueeze(ctx, data, axes):
    return _unsqueeze(ctx, data, _ints(axes, "Unsqueeze axes"))


@converter("Transpose", *versions("Transpose", 1))
def transpose(ctx, data, *, perm=None):
    rank = len(data.shape)
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"Transpose: perm {perm} is not a permutation of {rank} axes")
    if is_const(data):
        return np.transpose(data, perm)
    return Dyn(data.t, [data.dims[p] for p in perm], [data.shape[p] for p in perm], data.ops)


@converter("Identity", *versions("Identity", 1))
def identity(ctx, input):  # noqa: A002
    return input


@converter("Dropout", *versions("Dropout", 7))
def dropout(ctx, data, ratio=None, training_mode=None, *, seed=0):
    if training_mode is not None and (not is_const(training_mode) or bool(training_mode.reshape(()))):
        raise UnsupportedError("Dropout in training mode")
    return data


def _concat_const(*inputs, axis):
    return np.concatenate(inputs, axis=norm_axis(axis, inputs[0].ndim, "Concat"))


@converter("Concat", *versions("Concat", 4), fold=_concat_const)
def concat(ctx, *inputs, axis):
    rank = len(inputs[0].shape)
    a = norm_axis(axis, rank, "Concat")
    for x in inputs:
        if len(x.shape) != rank or any(s != t for i, (s, t) in enumerate(zip(x.shape, inputs[0].shape)) if i != a):
            raise ShapeError(f"Concat: shapes {[tuple(v.shape) for v in inputs]} differ off axis {axis}")
    inputs = [x for x in inputs if x.shape[a] != 0]
    total = sum(x.shape[a] for x in inputs)
    vals = [ctx.ready_to_pad(x, keep=(a,)) for x in inputs]
    if len(vals) == 1:
        return vals[0]
    # each part padded with zeros to the whole extent at its offset, all renamed to one axis,
    # then summed: x + 0 is x, and the backend splits the padded loops into their parts
    c = fresh("cat")
    parts, off = [], 0
    for v in vals:
        sym = v.dims[a]
        t = v.t.pad(sym, off, total - off - v.shape[a])
        dims = list(v.dims)
        dims[a] = t.symbolic_shape[list(v.t.symbolic_shape).index(sym)]
        shape = list(v.shape)
        shape[a] = total
        parts.append(Dyn(t, dims, shape, v.ops))
        off += v.shape[a]
    first = parts[0]
    out = first
    for p in parts[1:]:
        (ta, tb), dims, shape = broadcast([out, p], "Concat")
        out = Dyn(ta + tb, dims, shape, out.ops + p.ops)
    mapping = {out.dims[a]: c}
    t = out.t.to(*[mapping.get(s, s) for s in out.t.symbolic_shape])
    return Dyn(t, [mapping.get(d, d) for d in out.dims], out.shape, out.ops)


def _split_sizes(extent, split, n_outputs, what):
    if split is None:
        chunk = -(-extent // n_outputs)
        sizes = [chunk] * (n_outputs - 1) + [extent - chunk * (n_outputs - 1)]
    else:
        sizes = list(split)
    if sum(sizes) != extent or any(s < 0 for s in sizes):
        raise ShapeError(f"{what}: parts {sizes} do not add up to {extent}")
    if 0 in sizes:
        raise UnsupportedError(f"{what}: empty outputs are not supported")
    return sizes


def _split(ctx, input, axis, sizes):
    a = norm_axis(axis, len(input.shape), "Split")
    outs, off = [], 0
    if is_const(input):
        for s in sizes:
            outs.append(np.take(input, range(off, off + s), axis=a))
            off += s
        return outs
    v = ctx.ready(input, keep=(a,))
    for s in sizes:
        outs.append(slice_axis(v, a, off, s))
        off += s
    return outs


@converter("Split", 2, 11)
def split_2(ctx, input, *, axis=0, split=None):  # noqa: A002
    n = ctx.node_outputs
    return _split(ctx, input, axis, _split_sizes(input.shape[norm_axis(axis, len(input.shape), "Split")],
                                                 split, n, "Split"))


@converter("Split", 13, const=(1,))
def split_13(ctx, input, split=None, *, axis=0):  # noqa: A002
    n = ctx.node_outputs
    extent = input.shape[norm_axis(axis, len(input.shape), "Split")]
    return _split(ctx, input, axis, _split_sizes(extent, _ints(split, "Split split"), n, "Split"))


@converter("Split", *versions("Split", 18), const=(1,))
def split_18(ctx, input, split=None, *, axis=0, num_outputs=None):  # noqa: A002
    extent = input.shape[norm_axis(axis, len(input.shape), "Split")]
    sizes = _ints(split, "Split split")
    if sizes is None:
        n = num_outputs or ctx.node_outputs
        chunk = -(-extent // n)
        sizes = [chunk] * (extent // chunk) + ([extent % chunk] if extent % chunk else [])
    return _split(ctx, input, axis, _split_sizes(extent, sizes, len(sizes), "Split"))


def _slice_bounds(extent, start, end, step):
    """ONNX Slice clamping: the (first, count) of range(start, end, step) over an axis."""
    if step == 0:
        raise ShapeError("Slice: step 0")
    if start < 0:
        start += extent
    if end < 0:
        end += extent
    if step > 0:
        start, end = min(max(start, 0), extent), min(max(end, 0), extent)
    else:
        start, end = min(max(start, -1), extent - 1), min(max(end, -1), extent - 1)
    return start, len(range(start, end, step))


def _slice(ctx, data, starts, ends, axes, steps):
    rank = len(data.shape)
    axes = list(range(len(starts))) if axes is None else [norm_axis(a, rank, "Slice") for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError("Slice: starts, ends, axes and steps differ in length")
    plan = []
    for a, s, e, st in zip(axes, starts, ends, steps):
        first, count = _slice_bounds(data.shape[a], s, e, st)
        if count <= 0:
            raise UnsupportedError(f"Slice: empty result along axis {a}")
        plan.append((a, first, count, st))
    if is_const(data):
        idx = [slice(None)] * rank
        for a, first, count, st in plan:
            idx[a] = slice(first, first + count * st if first + count * st >= 0 else None, st)
        return data[tuple(idx)]
    keep = tuple(a for a, _, count, _ in plan if count > 1)
    v = ctx.ready(data, keep=keep)
    for a, first, count, st in plan:
        if first == 0 and count == v.shape[a] and st == 1:
            continue
        v = slice_axis(v, a, first, count, st)
    return v


@converter("Slice", 1)
def slice_1(ctx, data, *, starts, ends, axes=None):
    return _slice(ctx, data, starts, ends, axes, None)


@converter("Slice", *versions("Slice", 10), const=(1, 2, 3, 4))
def slice_(ctx, data, starts, ends, axes=None, steps=None):
    return _slice(ctx, data, _ints(starts, "Slice starts"), _ints(ends, "Slice ends"),
                  _ints(axes, "Slice axes"), _ints(steps, "Slice steps"))


def _pad(ctx, data, pads, value, mode, axes=None):
    rank = len(data.shape)
    axes = list(range(rank)) if axes is None else [norm_axis(a, rank, "Pad") for a in axes]
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    if mode != "constant":
        raise UnsupportedError(f"Pad mode {mode!r} (only 'constant')")
    before = dict(zip(axes, pads[:len(axes)]))
    after = dict(zip(axes, pads[len(axes):]))
    if is_const(data):
        crop = tuple(slice(max(-before[a], 0) if a in before else 0,
                           data.shape[a] - max(-after[a], 0) if a in after else None) for a in range(rank))
        widths = [(max(before.get(a, 0), 0), max(after.get(a, 0), 0)) for a in range(rank)]
        return np.pad(data[crop], widths, constant_values=value)
    # negative pads crop first
    v = data
    for a in axes:
        lo, hi = max(-before[a], 0), max(-after[a], 0)
        if lo or hi:
            count = v.shape[a] - lo - hi
            if count <= 0:
                raise UnsupportedError(f"Pad: axis {a} cropped to nothing")
            v = slice_axis(ctx.ready(v, keep=(a,)), a, lo, count)
    grow = [a for a in axes if before[a] > 0 or after[a] > 0]
    if not grow:
        return v
    v = ctx.ready_to_pad(v, keep=tuple(grow))
    t, dims, shape = v.t, list(v.dims), list(v.shape)
    for a in grow:
        sym = dims[a]
        at = list(t.symbolic_shape).index(sym)
        t = t.pad(sym, max(before[a], 0), max(after[a], 0))
        dims[a] = t.symbolic_shape[at]
        shape[a] += max(before[a], 0) + max(after[a], 0)
    out = Dyn(t, dims, shape, v.ops)
    if value != 0.0:
        # the padded border holds `value`: add a constant that is `value` there and 0 inside
        # (x + 0 is x exactly, unlike a shift of x)
        border = np.full([shape[a] for a in grow], np.float32(value), np.float32)
        inner = tuple(slice(max(before[a], 0), max(before[a], 0) + v.shape[a]) for a in grow)
        border[inner] = 0.0
        m = const_dyn(border.reshape([shape[a] if a in grow else 1 for a in range(rank)]), "Pad border",
                      keep=tuple(grow))
        (ta, tb), dims2, shape2 = broadcast([out, m], "Pad")
        out = Dyn(ta + tb, dims2, shape2, out.ops)
    return out


@converter("Pad", 2)
def pad_2(ctx, data, *, pads, mode="constant", value=0.0):
    return _pad(ctx, data, list(pads), float(value), mode)


@converter("Pad", *versions("Pad", 11), const=(1, 2, 3))
def pad(ctx, data, pads, constant_value=None, axes=None, *, mode="constant"):
    value = 0.0 if constant_value is None else float(np.asarray(constant_value).reshape(-1)[0]) \
        if np.asarray(constant_value).size else 0.0
    return _pad(ctx, data, _ints(pads, "Pad pads"), value, mode, _ints(axes, "Pad axes"))


# ---------------------------------------------------------------------------- shape arithmetic
@converter("Shape", *versions("Shape", 1))
def shape(ctx, data, *, start=0, end=None):
    s = list(data.shape)
    return np.array(s[slice(start, end)], np.int64)


@converter("Size", *versions("Size", 1))
def size(ctx, data):
    return np.array(int(np.prod(data.shape)), np.int64)


def _constant(value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
              value_string=None, value_strings=None, sparse_value=None):
    if value is not None:
        return value
    if value_float is not None:
        return np.array(value_float, np.float32)
    if value_floats is not None:
        return np.array(value_floats, np.float32)
    if value_int is not None:
        return np.array(value_int, np.int64)
    if value_ints is not None:
        return np.array(value_ints, np.int64)
    raise UnsupportedError("Constant: string and sparse values are not supported")


@converter("Constant", *versions("Constant", 1))
def constant(ctx, *, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
             value_string=None, value_strings=None, sparse_value=None):
    return _constant(value, value_float, value_floats, value_int, value_ints, value_string, value_strings,
                     sparse_value)


@converter("ConstantOfShape", *versions("ConstantOfShape", 9), const=(0,))
def constant_of_shape(ctx, input, *, value=None):  # noqa: A002
    v = np.zeros(1, np.float32) if value is None else value.reshape(-1)
    return np.full(_ints(input, "ConstantOfShape shape"), v[0], v.dtype)


MAX_GATHER_RUNS = 16   # each run of consecutive indices is a part of a concatenation


@converter("Gather", *versions("Gather", 1), const=(1,))
def gather(ctx, data, indices, *, axis=0):
    a = norm_axis(axis, len(data.shape), "Gather")
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + data.shape[a], idx)
    if np.any(idx < 0) or np.any(idx >= data.shape[a]):
        raise ShapeError(f"Gather: indices {indices.tolist()} out of range for extent {data.shape[a]}")
    if is_const(data):
        return np.take(data, idx, axis=a)
    if idx.ndim != 0:
        # the indices as runs of consecutive ones: a slice per run, joined along the axis
        flat = idx.reshape(-1)
        cuts = [0, *(np.nonzero(np.diff(flat) != 1)[0] + 1), flat.size]
        if len(cuts) - 1 > MAX_GATHER_RUNS:
            raise UnsupportedError(f"Gather of a run-time tensor with indices in {len(cuts) - 1} separate runs "
                                   f"is not supported (at most {MAX_GATHER_RUNS})")
        src = ctx.ready(data, keep=(a,))
        parts = [slice_axis(src, a, int(flat[lo]), int(hi - lo), keep=True) for lo, hi in zip(cuts, cuts[1:])]
        v = parts[0] if len(parts) == 1 else concat(ctx, *parts, axis=a)
        return _regroup(ctx, v, list(data.shape[:a]) + list(idx.shape) + list(data.shape[a + 1:]))
    v = slice_axis(ctx.ready(data), a, int(idx), 1)
    return Dyn(v.t, [d for i, d in enumerate(v.dims) if i != a], [s for i, s in enumerate(v.shape) if i != a],
               v.ops)


_CAST = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64, 10: np.float16,
         2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 12: np.uint32, 13: np.uint64}


@converter("Cast", *versions("Cast", 6))
def cast(ctx, input, *, to, saturate=1, round_mode="up"):  # noqa: A002
    if to not in _CAST:
        raise UnsupportedError(f"Cast to type {to}")
    if is_const(input):
        return input.astype(_CAST[to])
    if _CAST[to] is not np.float32:
        raise UnsupportedError(f"Cast of a run-time tensor to {np.dtype(_CAST[to])} (float32 only)")
    return input


@converter("Range", *versions("Range", 11), const=(0, 1, 2))
def range_(ctx, start, limit, delta):
    return np.arange(start.reshape(()), limit.reshape(()), delta.reshape(())).astype(start.dtype)


@converter("Expand", *versions("Expand", 8), const=(1,))
def expand(ctx, input, shape):  # noqa: A002
    target = _ints(shape, "Expand shape")
    if is_const(input):
        return input * np.ones(target, input.dtype)
    out = np.broadcast_shapes(tuple(input.shape), tuple(target))
    ones = np.ones([s if i >= len(out) - len(input.shape) and input.shape[i - len(out) + len(input.shape)] == s
                    and s != 1 else s for i, s in enumerate(out)], np.float32)
    # x * 1 is x exactly; the ones carry the axes x lacks
    for i in range(len(input.shape)):
        j = len(out) - len(input.shape) + i
        if input.shape[i] == out[j]:
            ones = np.take(ones, [0], axis=j)
    (ta, tb), dims, shp = broadcast([input, const_dyn(ones, "Expand")], "Expand")
    return Dyn(ta * tb, dims, shp, input.ops)


# ---------------------------------------------------------------------------- blocks <-> channels
def _reshape_transpose_reshape(ctx, x, first, perm, last):
    if is_const(x):
        return np.transpose(x.reshape(first), perm).reshape(last)
    v = _regroup(ctx, x, first)
    v = Dyn(v.t, [v.dims[p] for p in perm], [v.shape[p] for p in perm], v.ops)
    return _regroup(ctx, v, last)


@converter("DepthToSpace", *versions("DepthToSpace", 11))
def depth_to_space(ctx, input, *, blocksize, mode="DCR"):  # noqa: A002
    n, c, h, w = input.shape
    b = int(blocksize)
    if b < 1 or c % (b * b):
        raise ShapeError(f"DepthToSpace: {c} channels do not split into blocks of {b}x{b}")
    if mode == "DCR":
        first, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        first, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    else:
        raise UnsupportedError(f"DepthToSpace: mode {mode!r} is not supported")
    return _reshape_transpose_reshape(ctx, input, first, perm, (n, c // (b * b), h * b, w * b))


@converter("SpaceToDepth", *versions("SpaceToDepth", 1))
def space_to_depth(ctx, input, *, blocksize):  # noqa: A002
    n, c, h, w = input.shape
    b = int(blocksize)
    if b < 1 or h % b or w % b:
        raise ShapeError(f"SpaceToDepth: {h}x{w} does not split into blocks of {b}x{b}")
    return _reshape_transpose_reshape(ctx, input, (n, c, h // b, b, w // b, b), (0, 3, 5, 1, 2, 4),
                                      (n, c * b * b, h // b, w // b))


# ---------------------------------------------------------------------------- nearest upsampling
def _upsample(ctx, X, factors, what):
    """Nearest-neighbour upsampling by integer factors: X read with a unit axis after each
    upsampled one, multiplied by ones the factor long on it (x * 1 is x), read back merged."""
    shape = list(X.shape)
    if all(f == 1 for f in factors):
        return X
    if is_const(X):
        out = X
        for a, f in enumerate(factors):
            out = np.repeat(out, f, axis=a)
        return out
    grown, ones, final = [], [], []
    for d, f in zip(shape, factors):
        grown += [d, 1] if f > 1 else [d]
        ones += [1, f] if f > 1 else [1]
        final.append(d * f)
    v = _regroup(ctx, X, grown)
    (ta, tb), dims, shp = broadcast([v, const_dyn(np.ones(ones, np.float32), f"{what} ones")], what)
    return _regroup(ctx, Dyn(ta * tb, dims, shp, v.ops), final)


def _integer_factors(X, scales, sizes, axes, what):
    rank = len(X.shape)
    axes = list(range(rank)) if axes is None else [norm_axis(a, rank, what) for a in axes]
    factors = [1] * rank
    if sizes is not None and len(sizes):
        for a, n in zip(axes, sizes):
            if n % X.shape[a]:
                raise UnsupportedError(f"{what}: size {n} along axis {a}, not a multiple of {X.shape[a]}, is not "
                                       "supported (integer upsampling only)")
            factors[a] = n // X.shape[a]
    elif scales is not None and len(scales):
        for a, s in zip(axes, scales):
            if s != int(s) or s < 1:
                raise UnsupportedError(f"{what}: scale {s} is not supported (integer upsampling only)")
            factors[a] = int(s)
    else:
        raise ShapeError(f"{what}: neither scales nor sizes given")
    return factors


def _floats(x, what):
    if x is None:
        return None
    if not is_const(x):
        raise UnsupportedError(f"{what} must be a constant")
    return [float(v) for v in np.asarray(x).reshape(-1)]


def _check_nearest(mode, coordinate, nearest, what):
    if mode != "nearest":
        raise UnsupportedError(f"{what}: mode {mode!r} is not supported (nearest only)")
    # with an integer factor f these pick input o // f for output o
    if (coordinate, nearest) not in {("half_pixel", "round_prefer_floor"), ("half_pixel", "round_prefer_ceil"),
                                      ("asymmetric", "floor"), ("pytorch_half_pixel", "round_prefer_floor")}:
        raise UnsupportedError(f"{what}: coordinate_transformation_mode {coordinate!r} with nearest_mode "
                               f"{nearest!r} is not supported")


@converter("Upsample", 9, const=(1,))
def upsample(ctx, X, scales, *, mode="nearest"):
    _check_nearest(mode, "asymmetric", "floor", "Upsample")
    return _upsample(ctx, X, _integer_factors(X, _floats(scales, "Upsample scales"), None, None, "Upsample"),
                     "Upsample")


@converter("Resize", 10, const=(1,))
def resize_10(ctx, X, scales, *, mode="nearest"):
    _check_nearest(mode, "asymmetric", "floor", "Resize")
    return _upsample(ctx, X, _integer_factors(X, _floats(scales, "Resize scales"), None, None, "Resize"), "Resize")


@converter("Resize", *versions("Resize", 11), const=(1, 2, 3))
def resize(ctx, X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None, coordinate_transformation_mode="half_pixel",
           cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
           mode="nearest", nearest_mode="round_prefer_floor"):
    _check_nearest(mode, coordinate_transformation_mode, nearest_mode, "Resize")
    if keep_aspect_ratio_policy != "stretch" and sizes is not None:
        raise UnsupportedError(f"Resize: keep_aspect_ratio_policy {keep_aspect_ratio_policy!r} is not supported")
    factors = _integer_factors(X, _floats(scales, "Resize scales"), _ints(sizes, "Resize sizes"), axes, "Resize")
    return _upsample(ctx, X, factors, "Resize")


@converter("Tile", *versions("Tile", 6), const=(1,))
def tile(ctx, input, repeats):  # noqa: A002
    reps = _ints(repeats, "Tile repeats")
    if len(reps) != len(input.shape) or any(r < 1 for r in reps):
        raise ShapeError(f"Tile: repeats {reps} for shape {tuple(input.shape)}")
    if is_const(input):
        return np.tile(input, reps)
    v = input
    for a, r in enumerate(reps):
        if r > 1:   # r copies of one stored value, joined along the axis
            v = ctx.materialize(v)
            v = concat(ctx, *[v] * r, axis=a)
    return v


# ---------------------------------------------------------------------------- constant-only operators
def _fold_only(op: str, first: int, np_fn, n_inputs: int):
    """An operator loopstack folds when its inputs are constants (the comparisons and selects
    of exported shape arithmetic) but cannot run: booleans and integers do not reach kernels."""
    def convert(ctx, *inputs):
        raise UnsupportedError(f"{op} of a run-time tensor is not supported (only on constants, folded at import)")

    def fold(*inputs):
        return np.asarray(np_fn(*inputs))

    convert.__name__ = op.lower()
    converter(op, *versions(op, first), fold=fold)(convert)


for _op, _fn, _n in (("Equal", np.equal, 2), ("Less", np.less, 2), ("LessOrEqual", np.less_equal, 2),
                     ("Greater", np.greater, 2), ("GreaterOrEqual", np.greater_equal, 2),
                     ("Not", np.logical_not, 1), ("And", np.logical_and, 2), ("Or", np.logical_or, 2),
                     ("Xor", np.logical_xor, 2), ("Where", np.where, 3), ("Floor", np.floor, 1),
                     ("Ceil", np.ceil, 1), ("Sign", np.sign, 1)):
    _fold_only(_op, 7 if _n > 1 else 6, _fn, _n)


@converter("CastLike", *versions("CastLike", 15), fold=lambda x, like, saturate=1, round_mode="up": x.astype(like.dtype))
def cast_like(ctx, input, target_type, *, saturate=1, round_mode="up"):  # noqa: A002
    if is_const(target_type) and target_type.dtype == np.float32 and not is_const(input):
        return input
    raise UnsupportedError("CastLike of a run-time tensor to a type other than float32 is not supported")
