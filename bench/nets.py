"""Whole networks (MLP, MobileNetV3-Small, ResNet-18, a BERT encoder layer) through loopstack
and onnxruntime, one thread: latency, max abs error, time to the first result, peak memory.

    python bench/nets.py [--model NAME]... [--rounds N] [--threads N] [--json FILE]
    python bench/nets.py --layers [--model NAME]...    each layer beside onnxruntime's nodes

The same as `loopstack bench --suite nets`; see loopstack/onnx/netbench.py.
"""
import sys

from loopstack.onnx.netbench import main

if __name__ == "__main__":
    sys.exit(main())
