"""The x86 code of every workload and of a seeded set of drawn trees is byte-identical to the
recorded hashes (tests/x86_code_hashes.json). A deliberate change of the generated code
re-records them with `python3 tests/x86_code_hashes.py --record`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from x86_code_hashes import changed_trees, compute  # noqa: E402


def test_x86_code_is_byte_identical_to_the_record():
    changed = changed_trees(compute())
    assert not changed, f"{len(changed)} trees compile to different code: {changed[:10]}"
