"""The nest walk is shared by every CPU instruction set: it imports no instruction set."""
import ast
from pathlib import Path

import loopstack.backend as backend

SHARED = ("nest.py", "emitter.py", "values.py", "native.py", "vmath.py", "analysis.py", "prefetch.py", "rewrite.py",
          "constants.py", "padding.py")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    return names


def test_the_walk_imports_no_instruction_set():
    root = Path(backend.__file__).parent
    for name in SHARED:
        for mod in _imports(root / name):
            assert "x86" not in mod and "aarch64" not in mod, f"backend/{name} imports {mod}"


def test_the_walk_names_no_instruction():
    """No mnemonic or register name appears in the walk's code (only in its docstrings)."""
    src = (Path(backend.__file__).parent / "nest.py").read_text()
    tree = ast.parse(src)
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    doc = {ast.get_docstring(n) for n in ast.walk(tree)
           if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))} - {None}
    for s in strings:
        if s.strip() in {d.strip() for d in doc} or s.startswith(("loop ", "parallel")):
            continue
        for word in ("vmov", "vfmadd", "rax", "rsp", "fmla", "ldr", "x86"):
            assert word not in s, f"nest.py names {word!r} in {s!r}"
