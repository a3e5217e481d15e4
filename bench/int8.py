"""Quantized kernels against onnxruntime (and torch, where installed) and loopstack's own fp32:
the same table as `loopstack bench --suite int8` (see loopstack/commands/bench_int8.py).

    python3 bench/int8.py [--json FILE] [--runs N] [--rounds N] [-w GEMM-512 ...]
                          [--target avx2] [--widening] [--instr avx2.dot.u8s8.bcst_a]

`--target avx2 --widening` is what an AVX2 CPU without VNNI runs (Zen 3): the exact vpmaddwd path
on 16-bit pairs; `--instr avx2.dot.u8s8.bcst_a` beside it, the byte-widening path it replaced.
"""
import os
import sys

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

from loopstack.commands.bench_int8 import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
