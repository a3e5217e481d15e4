"""The ONNX tests need the `onnx` extra (and onnxruntime as the oracle): CI installs both."""
import os
import sys

import pytest

pytest.importorskip("onnx", reason="the onnx extra is not installed (pip install -e '.[onnx]')")
pytest.importorskip("onnxruntime", reason="onnxruntime (the oracle) is not installed")

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
