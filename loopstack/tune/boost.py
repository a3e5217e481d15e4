"""Gradient-boosted regression trees (least squares, Friedman 2001), small enough to refit
after every measured batch of a tuning search.

Each round fits a depth-limited tree to the residuals of the ensemble so far and adds it
scaled by `rate`.  A split is chosen, per node, over every feature and every gap between
distinct sorted values, by the reduction of the squared error; a node with fewer than
`2 * min_leaf` samples or no useful split becomes a leaf holding its mean residual.
Everything is deterministic: the same data give the same trees.
"""
from __future__ import annotations

import numpy as np


def _best_split(X: np.ndarray, r: np.ndarray, min_leaf: int):
    """(gain, feature, threshold) of the split of samples X, residuals r that most reduces
    the squared error, or None.  All features at once: column-wise sorts and prefix sums."""
    n = len(r)
    order = np.argsort(X, axis=0, kind="stable")
    x = np.take_along_axis(X, order, axis=0)
    sl = np.cumsum(r[order], axis=0)[:-1]            # sums left of each cut, per feature
    total = float(r.sum())
    nl = np.arange(1, n, dtype=np.float64)[:, None]
    # the error reduction of cutting after row i: S_l^2/n_l + S_r^2/n_r - S^2/n
    gain = sl * sl / nl + (total - sl) ** 2 / (n - nl) - total * total / n
    ok = (x[1:] > x[:-1]) & (nl >= min_leaf) & (n - nl >= min_leaf)
    gain = np.where(ok, gain, -np.inf)
    i, f = np.unravel_index(int(np.argmax(gain)), gain.shape)
    if not gain[i, f] > 1e-12:
        return None
    return float(gain[i, f]), int(f), float((x[i, f] + x[i + 1, f]) / 2)


def _fit_tree(X, r, depth: int, min_leaf: int):
    """A tree as nested tuples: (feature, threshold, left, right), or a leaf value."""
    if depth == 0 or len(r) < 2 * min_leaf:
        return float(r.mean())
    split = _best_split(X, r, min_leaf)
    if split is None:
        return float(r.mean())
    _, f, t = split
    go_left = X[:, f] < t
    return (f, t, _fit_tree(X[go_left], r[go_left], depth - 1, min_leaf),
            _fit_tree(X[~go_left], r[~go_left], depth - 1, min_leaf))


def _predict_tree(tree, X) -> np.ndarray:
    if not isinstance(tree, tuple):
        return np.full(len(X), tree)
    f, t, left, right = tree
    out = np.empty(len(X))
    go_left = X[:, f] < t
    out[go_left] = _predict_tree(left, X[go_left])
    out[~go_left] = _predict_tree(right, X[~go_left])
    return out


class GradientBoostedTrees:
    def __init__(self, rounds: int = 60, depth: int = 3, rate: float = 0.1, min_leaf: int = 3):
        self.rounds, self.depth, self.rate, self.min_leaf = rounds, depth, rate, min_leaf
        self.base = 0.0
        self.trees: list = []

    def fit(self, X, y) -> "GradientBoostedTrees":
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
        self.base = float(y.mean())
        residual = y - self.base
        self.trees = []
        for _ in range(self.rounds):
            tree = _fit_tree(X, residual, self.depth, self.min_leaf)
            if not isinstance(tree, tuple):
                break                      # nothing left that a split explains
            self.trees.append(tree)
            residual = residual - self.rate * _predict_tree(tree, X)
        return self

    def predict(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        out = np.full(len(X), self.base)
        for tree in self.trees:
            out += self.rate * _predict_tree(tree, X)
        return out
