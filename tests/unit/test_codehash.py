"""The generated machine code of every benchmark program is the recorded one, byte for byte.

Work on the compile path (the encoder, the instruction table, the passes) must not change what
is emitted. When a change means to alter the code, re-record and review the listed programs:

    python3 bench/codehash.py --write tests/data/code_hashes.json
"""
import json
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_ROOT, "bench"))

import codehash  # noqa: E402

RECORD = os.path.join(_ROOT, "tests", "data", "code_hashes.json")


def test_every_program_emits_the_recorded_code():
    with open(RECORD) as f:
        recorded = json.load(f)
    diff = codehash.compare(recorded, codehash.digests())
    assert not diff, ("generated code changed (re-record with bench/codehash.py --write if meant):\n"
                      + "\n".join(diff))


def test_compare_names_every_kind_of_difference():
    lines = codehash.compare({"a/avx2": "1" * 64, "b/avx2": "2" * 64}, {"a/avx2": "3" * 64, "c/avx2": "4" * 64})
    assert lines == ["a/avx2: code differs (111111111111 recorded, 333333333333 now)",
                     "b/avx2: recorded, not generated now", "c/avx2: generated now, not recorded"]
