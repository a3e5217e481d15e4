"""Quantized kernels against onnxruntime (and torch, where installed) and loopstack's own fp32:
the same table as `loopstack bench --suite int8` (see loopstack/commands/bench_int8.py).

    python3 bench/int8.py [--json FILE] [--runs N] [--rounds N] [-w GEMM-512 ...]
"""
import os
import sys

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

from loopstack.commands.bench_int8 import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
