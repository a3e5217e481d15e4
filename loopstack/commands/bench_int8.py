"""`loopstack bench --suite int8` (and bench/int8.py): quantized kernels against their peers.

Workloads: GEMM 256/512/1024 uint8 x int8 -> int32; the paper's CONV-1..4 quantized (uint8
activations NHWC, int8 weights per output channel, int32 bias, requantized uint8 output); one
depthwise convolution. Per row, in one run on one core: loopstack's GOPS, its share of the int8
peak (a JIT'd chain of the instruction the kernel uses, probed beside every round), compile ms,
the instruction, whether the output equals the peers' bit for bit; onnxruntime's
`MatMulInteger` / `QLinearConv` (single thread) and, where installed, torch's quantized conv
(fbgemm); and loopstack's own fp32 kernel of the same shape. The median of rounds counts.

`--widening` compiles for the target without its dot-product extensions (VNNI, AVX-VNNI): the
exact path on 16-bit pairs an AVX2 CPU without them runs. `--instr NAME` rewrites each
contraction for one registry entry instead of the one the compile picks (`avx2.dot.u8s8.bcst_a`:
the byte-widening path, which widens both operands in registers at every use).
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from ..looptree.builders import conv2d_tree, matmul_tree
from ..looptree.ir import Buffer, Load, LoopTree, Requant, replace
from ..looptree.builders import access
from ..timing import best_seconds

GEMMS = (256, 512, 1024)
CONVS = ((1, 64, 128, 56), (2, 128, 256, 28), (3, 256, 512, 14), (4, 512, 512, 7))   # as workloads.py
DWCONV = (1, 16, 112, 2)


# ------------------------------------------------------------------------------ the programs
def gemm_tree(n: int) -> LoopTree:
    t = matmul_tree(n, n, n)
    types = {"A": ("uint8", False), "B": ("int8", True), "C": ("int32", False)}
    return LoopTree(tuple(replace(b, dtype=types[b.name][0], constant=types[b.name][1]) for b in t.buffers),
                    t.dims, t.body)


def qconv_tree(c: int, k: int, h: int, *, depthwise: bool = False, stride: int = 1, zero_point: int = 0) -> LoopTree:
    """NHWC 3x3 convolution, padding 1: uint8 X, int8 weights (constant), int32 bias, a float32
    scale per output channel, uint8 output."""
    if depthwise:
        from ..looptree.builders import depthwise_conv2d_tree
        t = depthwise_conv2d_tree(c, h, h, 3, 3, stride=stride, padding=1)
        out_ch, w_name, y_name, x_name = "c", "Wt", "Y", "X"
    else:
        t = conv2d_tree(1, c, h, h, k, 3, 3, stride=stride, padding=1, layout="NHWC")
        out_ch, w_name, y_name, x_name = "k", "Wt", "Y", "X"
    kk = c if depthwise else k
    types = {x_name: "uint8", w_name: "int8", y_name: "uint8"}
    bufs = [replace(b, dtype=types[b.name], constant=b.name == w_name) for b in t.buffers if b.kind != "output"]
    bufs += [Buffer("bias", "int32", (kk,), "input", constant=True), Buffer("scale", "float32", (kk,), "input", constant=True)]
    bufs += [replace(b, dtype="uint8") for b in t.buffers if b.kind == "output"]
    (stack, stmt), = t.computes()
    new = replace(stmt, init=Load(access("bias", out_ch)), requant=Requant(Load(access("scale", out_ch)), zero_point))

    def swap(node):
        if node is stmt:
            return new
        return replace(node, body=tuple(swap(n) for n in node.body)) if hasattr(node, "body") else node
    return LoopTree(tuple(bufs), t.dims, tuple(swap(n) for n in t.body))


# ------------------------------------------------------------------------------ onnxruntime
def _ort_session(nodes, inputs, outputs, inits):
    import onnxruntime as ort
    from onnx import helper

    graph = helper.make_graph(nodes, "q", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_matmul_integer(A, B):
    from onnx import TensorProto, helper, numpy_helper

    sess = _ort_session([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                        [helper.make_tensor_value_info("a", TensorProto.UINT8, A.shape)],
                        [helper.make_tensor_value_info("y", TensorProto.INT32, (A.shape[0], B.shape[1]))],
                        [numpy_helper.from_array(B, "b")])
    return lambda: sess.run(None, {"a": A})[0]


def ort_qlinear_conv(X_nchw, W_kcrs, bias, x_scale, w_scale, y_scale, y_zp, group=1, stride=1):
    from onnx import TensorProto, helper, numpy_helper

    f32 = lambda v, n: numpy_helper.from_array(np.asarray(v, np.float32), n)  # noqa: E731
    inits = [f32(x_scale, "xs"), numpy_helper.from_array(np.uint8(0), "xz"), numpy_helper.from_array(W_kcrs, "w"),
             f32(w_scale, "ws"), numpy_helper.from_array(np.zeros(len(w_scale), np.int8), "wz"),
             f32(y_scale, "ys"), numpy_helper.from_array(np.uint8(y_zp), "yz"), numpy_helper.from_array(bias, "b")]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            pads=[1, 1, 1, 1], strides=[stride, stride], group=group)
    sess = _ort_session([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, X_nchw.shape)],
                        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    return lambda: sess.run(None, {"x": X_nchw})[0]


# ------------------------------------------------------------------------------ measuring
def _gops(fn, ops, runs):
    return ops / best_seconds(fn, runs) / 1e9


def int8_peak(instr) -> float:
    """GOPS of a chain of `instr` on this core (see backend/x86/dot.py; tiles: backend/x86/amx.py)."""
    from ..isa.execmem import ExecutableCode

    if instr.tile:
        from ..backend.x86.amx import tile_probe_code
        code, chains, n = tile_probe_code(instr), 4, 2000
    else:
        from ..backend.x86.dot import dot_probe_code, probe_chains
        code, chains, n = dot_probe_code(instr), probe_chains(instr), 20000
    probe = ExecutableCode(code, "void(*)(int64_t)")
    return chains * instr.lanes * instr.k * 2 * n / best_seconds(lambda: probe(n), 5) / 1e9


def _fp32_gflops(shape_kind, dims, runs, target):
    """loopstack's own fp32 kernel of the same shape, with the schedule `loopstack bench` uses
    (the tuning database's best, else the default schedule)."""
    from ..isa.target import get_target
    from ..tune.defaults import chosen_schedule
    from ..workloads import get_workload
    import loopstack as lt

    if shape_kind == "gemm":
        n = dims
        rng = np.random.default_rng(0)
        s = lt.SymbolGenerator()
        Y = (lt.Tensor(rng.standard_normal((n, n)).astype(np.float32)).to(s.m, s.k)
             * lt.Tensor(rng.standard_normal((n, n)).astype(np.float32), constant=True).to(s.k, s.n)).sum(s.k)
    else:
        Y, _ = get_workload(f"CONV-{dims}").build(0)
    Y.set(chosen_schedule(Y, get_target(target), None)[0])
    kernel = Y.compile(target)
    kernel.threads = 1               # the peers and the int8 kernels run on one core
    return kernel.benchmark(runs=runs)


def _placed(array: np.ndarray, align: int) -> np.ndarray:
    """`array` copied to an address that is a multiple of `align` bytes (0: where numpy put it)."""
    if not align:
        return array
    raw = np.empty(array.nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    placed = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    placed[...] = array
    return placed


def compile_with(tree, target, instr_name=None):
    """The kernel of `tree`; with `instr_name`, its contraction rewritten for that registry entry
    on the compile's default register block (a tree it does not apply to compiles as it is)."""
    from ..backend import compile as compile_tree
    from ..backend.tensorize import instruction, tensorize
    from ..backend.tensorize.apply import register_block
    from ..errors import ScheduleError, UnsupportedError
    from ..isa.target import get_target

    if instr_name is not None:
        target, instr = get_target(target), instruction(instr_name)
        try:
            tree = tensorize(tree, instr, block=register_block(target, instr)).tree
        except (ScheduleError, UnsupportedError):
            pass                    # not a contraction that entry computes (a depthwise sum)
    return compile_tree(tree, target=target)


def measure(name, tree, args_fn, ops, peers_fn, fp32, runs, rounds, target, instr_name=None, align=0):

    # a process's first use of a mnemonic parses its encoder table rows (isa/x86/forms.py): the
    # best of three compiles is the kernel's own cost, as in a process that has compiled before;
    # its CPU time beside the wall time, which a loaded machine inflates
    compile_ms = compile_cpu_ms = float("inf")
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        kernel = compile_with(tree, target, instr_name)
        compile_ms = min(compile_ms, (time.perf_counter() - t0) * 1e3)
        compile_cpu_ms = min(compile_cpu_ms, (time.process_time() - c0) * 1e3)
    kernel.threads = 1
    # where the operands lie moves a tile kernel by a third (a 64-byte tile row read from an
    # address 16 past a line boundary touches two lines): --align fixes it for every round
    arrays = [_placed(x, align) for x in args_fn()]
    out = _placed(np.zeros(tree.outputs[0].shape, tree.outputs[0].dtype), align)
    kernel(*arrays, out)
    peers, expected = peers_fn(arrays)
    row = {"name": name, "instr": kernel.tensorized or "-", "compile_ms": compile_ms,
           "compile_cpu_ms": compile_cpu_ms, "ops": ops}
    row["exact"] = all(np.array_equal(out, e()) for e in expected.values())
    from ..backend.tensorize import instruction
    instr = instruction(kernel.tensorized) if kernel.tensorized else None
    gops, pct, peer_gops = [], [], {p: [] for p in peers}
    for _ in range(rounds):
        peak = int8_peak(instr) if instr is not None else float("nan")
        g = _gops(lambda: kernel(*arrays, out), ops, runs)
        gops.append(g)
        pct.append(100 * g / peak)
        for p, fn in peers.items():
            peer_gops[p].append(_gops(fn, ops, runs))
    row["gops"] = statistics.median(gops)
    row["peak_pct"] = statistics.median(pct)
    row["peers_gops"] = {p: statistics.median(v) for p, v in peer_gops.items()}
    row["fp32_gflops"] = fp32()
    return row


def rows(runs: int = 10, rounds: int = 3, target=None, names=None, progress=None, instr_name=None, align=0):
    rng = np.random.default_rng(0)
    out = []
    jobs = []
    for n in GEMMS:
        jobs.append((f"GEMM-{n}", n))
    for i, c, k, h in CONVS:
        jobs.append((f"QCONV-{i}", (i, c, k, h)))
    jobs.append((f"QDWCONV-{DWCONV[0]}", DWCONV))
    for idx, (name, spec) in enumerate(jobs):
        if names and name not in names:
            continue
        if progress:
            progress(idx, len(jobs), name)
        if name.startswith("GEMM"):
            n = spec
            A = rng.integers(0, 256, (n, n)).astype(np.uint8)
            B = rng.integers(-128, 128, (n, n)).astype(np.int8)
            def peers_fn(arrays, A=A, B=B):
                fn = ort_matmul_integer(A, B)
                return {"onnxruntime": fn}, {"numpy": lambda: A.astype(np.int32) @ B.astype(np.int32)}
            out.append(measure(name, gemm_tree(n), lambda A=A, B=B: [A, B], 2 * n ** 3, peers_fn,
                               lambda n=n: _fp32_gflops("gemm", n, runs, target), runs, rounds, target,
                               instr_name, align))
            continue
        depthwise = name.startswith("QDW")
        if depthwise:
            _, c, h, stride = spec
            k, oh = c, (h + 2 - 3) // stride + 1
        else:
            i, c, k, h = spec
            stride, oh = 1, h
        tree = qconv_tree(c, k, h, depthwise=depthwise, stride=stride, zero_point=3)
        X = rng.integers(0, 256, tree.buffer("X").shape).astype(np.uint8)
        W = rng.integers(-128, 128, tree.buffer("Wt").shape).astype(np.int8)
        bias = rng.integers(-20000, 20000, k).astype(np.int32)
        x_scale, y_scale = np.float32(0.02), np.float32(0.5)
        w_scale = rng.uniform(0.001, 0.01, k).astype(np.float32)
        scale = (x_scale * w_scale) / y_scale          # float32, as onnxruntime computes it
        ops = 2 * oh * oh * k * 9 * (1 if depthwise else c)

        def peers_fn(arrays, X=X, W=W, bias=bias, w_scale=w_scale, depthwise=depthwise, stride=stride):
            Xn = np.ascontiguousarray(X.reshape(X.shape[-3:]).transpose(2, 0, 1)[None])
            Wk = (np.ascontiguousarray(W.transpose(2, 0, 1)[:, None]) if depthwise
                  else np.ascontiguousarray(W.transpose(3, 2, 0, 1)))
            fn = ort_qlinear_conv(Xn, Wk, bias, x_scale, w_scale, y_scale, 3, group=k if depthwise else 1, stride=stride)
            ref = lambda: fn()[0].transpose(1, 2, 0).reshape(tree.outputs[0].shape)  # noqa: E731
            return {"onnxruntime": fn}, {"onnxruntime": ref}
        fp32 = (lambda: float("nan")) if depthwise else (lambda i=spec[0]: _fp32_gflops("conv", i, runs, target))
        out.append(measure(name, tree, lambda X=X, W=W, bias=bias, scale=scale: [X, W, bias, scale], ops,
                           peers_fn, fp32, runs, rounds, target, instr_name, align))
    return out


def format_table(rows_) -> str:
    head = (f"{'workload':<11} {'instr':<22} {'GOPS':>7} {'%peak':>6} {'compile':>8} {'cpu':>7} {'exact':>6} "
            f"{'ORT':>7} {'xORT':>6} {'fp32':>7} {'xfp32':>6}")
    lines = [head]
    for r in rows_:
        ort = r["peers_gops"].get("onnxruntime", float("nan"))
        lines.append(f"{r['name']:<11} {r['instr']:<22} {r['gops']:7.1f} {r['peak_pct']:6.1f} "
                     f"{r['compile_ms']:7.1f}m {r.get('compile_cpu_ms', float('nan')):6.1f}m {str(r['exact']):>6} "
                     f"{ort:7.1f} {r['gops'] / ort:6.2f} "
                     f"{r['fp32_gflops']:7.1f} {r['gops'] / r['fp32_gflops']:6.2f}")
    return "\n".join(lines)


def record(r) -> dict:
    return {"name": r["name"], "instr": r["instr"], "gops": r["gops"], "peak_pct": r["peak_pct"],
            "compile_ms": r["compile_ms"], "compile_cpu_ms": r["compile_cpu_ms"], "exact": r["exact"],
            "fp32_gflops": r["fp32_gflops"],
            **{f"{p}_gops": v for p, v in r["peers_gops"].items()}}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target", default=None)
    ap.add_argument("--workload", "-w", action="append", default=[])
    ap.add_argument("--widening", action="store_true",
                    help="compile without VNNI / AVX-VNNI, as for a CPU without them (the exact vpmaddwd path)")
    ap.add_argument("--instr", metavar="NAME", default="auto",
                    help="auto: the compile's choice (AMX tiles where the CPU has them); vnni: vector dot "
                         "products only (vpdpbusd), as on a CPU without AMX; or a registry entry to tensorize "
                         "with (e.g. avx2.dot.u8s8.bcst_a, the byte-widening path)")
    ap.add_argument("--align", type=int, default=0, metavar="BYTES",
                    help="place loopstack's operands and output at multiples of BYTES (64: whole cache "
                         "lines); default: where numpy allocates them")
    args = ap.parse_args(argv)
    return run(args)


def run(args) -> int:
    import dataclasses

    from ..isa.cpu import cpu_brand
    from ..isa.target import get_target

    target = args.target
    instr = getattr(args, "instr", None) or "auto"
    if getattr(args, "widening", False):     # no VNNI / AVX-VNNI: what a CPU without them runs
        target = dataclasses.replace(get_target(target), extensions=frozenset())
    elif instr == "vnni":                     # no tiles: what a CPU without AMX runs
        t = get_target(target)
        target = dataclasses.replace(t, extensions=frozenset(e for e in t.extensions if not e.startswith("amx")))
    got = rows(args.runs, args.rounds, target, set(args.workload) or None,
               progress=lambda i, n, name: print(f"[{i + 1}/{n}] {name}", file=sys.stderr),
               instr_name=None if instr in ("auto", "vnni") else instr,
               align=getattr(args, "align", 0))
    print(f"int8 kernels on {cpu_brand()}, one thread; %peak: share of the kernel's instruction chain "
          "probed beside each round; exact: equal to the peer (onnxruntime, or numpy's int32) bit for bit")
    print(format_table(got))
    if args.json:
        from ..timing import write_records
        write_records(args.json, [record(r) for r in got])
    return 0 if all(r["exact"] for r in got) else 1


if __name__ == "__main__":
    raise SystemExit(main())
