"""A small parser for the PTX subset the interpreter runs: a module's entries, their parameters,
register and shared-memory declarations, labels and instructions with guards and operands.

Register names are resolved against the `{ }` block scopes here, so the executor sees one unique
name per declared register; names that are no register (labels, shared variables, parameters)
stay symbols and are resolved when a kernel is bound for a launch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ....errors import SimulationError
from .numeric import TYPES

# ---- operands ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reg:
    name: str                 # unique after scoping
    neg: bool = False         # `!%p` (predicates only)


@dataclass(frozen=True)
class Imm:
    text: str                 # "42", "-1", "0x3C00", "0f3F800000", "1.5"


@dataclass(frozen=True)
class Sym:
    name: str                 # a label, a shared variable or a parameter


@dataclass(frozen=True)
class Special:
    name: str                 # "%tid.x", "%laneid"


@dataclass(frozen=True)
class Sink:                   # `_`
    pass


@dataclass(frozen=True)
class Vec:
    items: tuple


@dataclass(frozen=True)
class Addr:
    base: object              # Reg, Sym or None
    offset: int


@dataclass(frozen=True)
class Pair:                   # `%p|%q`: setp's two destinations
    first: Reg
    second: object            # Reg or Sink


SPECIAL_REGISTERS = {f"%{r}.{c}" for r in ("tid", "ntid", "ctaid", "nctaid") for c in "xyz"} | {
    "%laneid", "%warpid", "%nwarpid", "%warpsize"}


@dataclass
class Instr:
    opcode: str               # "mma"
    mods: tuple               # ("sync", "aligned", "m16n8k16", ...)
    operands: tuple
    guard: object             # Reg (neg for @!p) or None
    line: int
    text: str

    @property
    def full(self) -> str:
        return ".".join((self.opcode,) + self.mods)

    def where(self) -> str:
        return f"line {self.line} `{self.text}`"


@dataclass
class SharedVar:
    name: str
    align: int
    size: int                 # bytes; 0 for an extern (dynamic) array
    extern: bool


@dataclass
class Param:
    name: str
    type: str                 # "u64", "s32", ...
    size: int
    align: int


@dataclass
class Entry:
    name: str
    params: list = field(default_factory=list)
    regs: dict = field(default_factory=dict)          # unique name -> type name
    shared: list = field(default_factory=list)
    body: list = field(default_factory=list)          # Instr
    labels: dict = field(default_factory=dict)        # label -> index into body
    thread_limits: dict = field(default_factory=dict)  # ".maxntid" / ".reqntid" -> (x, y, z)


@dataclass
class Module:
    entries: dict
    shared: list              # module-scope .shared declarations


# ---- tokens -------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"[^"]*")
  | (?P<num>0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|0[xX][0-9a-fA-F]+U?|\d+\.\d*(?:[eE][+-]?\d+)?|\d+U?)
  | (?P<id>[%$._A-Za-z][\w$.]*)
  | (?P<p>[{}()\[\],;:+\-!|<>@=])
""", re.VERBOSE)


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _tokenize(text: str):
    tokens, line, pos = [], 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise SimulationError(f"PTX line {line}: cannot parse {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        if kind == "ws":
            line += m.group(0).count("\n")
        else:
            tokens.append((kind, m.group(0), line))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.toks = _tokenize(_strip_comments(text))
        self.i = 0

    # -- token helpers
    def peek(self, k=0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else ("eof", "", self.toks[-1][2] if self.toks else 0)

    def next(self):
        tok = self.peek()
        self.i += 1
        return tok

    def expect(self, value):
        kind, text, line = self.next()
        if text != value:
            raise SimulationError(f"PTX line {line}: expected {value!r}, found {text!r}")
        return text

    def error(self, msg):
        raise SimulationError(f"PTX line {self.peek()[2]}: {msg}")

    def skip_statement(self):
        while self.peek()[1] != ";" and self.peek()[0] != "eof":
            self.next()
        self.next()

    # -- module
    def module(self) -> Module:
        entries, shared = {}, []
        while self.peek()[0] != "eof":
            text = self.peek()[1]
            if text in (".version", ".address_size"):
                self.next()
                self.next()
            elif text == ".target":                     # .target sm_80{, texmode_..}
                self.next()
                self.next()
                while self.peek()[1] == ",":
                    self.next()
                    self.next()
            elif text == ".pragma":
                self.skip_statement()
            elif text in (".visible", ".weak", ".entry"):
                while self.peek()[1] in (".visible", ".weak"):
                    self.next()
                if self.peek()[1] != ".entry":
                    self.error(f"unsupported: {self.peek()[1]} (only .entry functions run)")
                e = self.entry()
                entries[e.name] = e
            elif text in (".shared", ".extern"):
                shared.append(self.shared_decl())
            else:
                self.error(f"unsupported: {text}")
        return Module(entries, shared)

    def entry(self) -> Entry:
        self.expect(".entry")
        e = Entry(self.next()[1])
        if self.peek()[1] == "(":
            self.next()
            while self.peek()[1] != ")":
                e.params.append(self.param())
                if self.peek()[1] == ",":
                    self.next()
            self.next()
        while self.peek()[1] != "{":               # .maxntid, .reqntid, .minnctapersm ...
            kind, text, _ = self.next()
            if kind == "eof":
                self.error(f"entry {e.name} has no body")
            if text in (".maxntid", ".reqntid"):
                dims = [int(self.next()[1])]
                while self.peek()[1] == ",":
                    self.next()
                    dims.append(int(self.next()[1]))
                e.thread_limits[text] = tuple(dims + [1] * (3 - len(dims)))
        self.body(e)
        return e

    def param(self) -> Param:
        self.expect(".param")
        typ, align, name, count = None, None, None, 1
        while True:
            kind, text, line = self.next()
            if text == ".align":
                align = int(self.next()[1])
            elif text in (".ptr", ".global", ".shared", ".const", ".local"):
                pass
            elif text.startswith(".") and text[1:] in TYPES:
                typ = text[1:]
            elif kind == "id":
                name = text
                if self.peek()[1] == "[":
                    self.next()
                    count = int(self.next()[1])
                    self.expect("]")
                break
            else:
                raise SimulationError(f"PTX line {line}: bad parameter declaration at {text!r}")
        if typ is None or name is None:
            self.error("a parameter needs a type and a name")
        size = TYPES[typ].size * count
        return Param(name, typ, size, align or TYPES[typ].size)

    def shared_decl(self) -> SharedVar:
        extern = False
        if self.peek()[1] == ".extern":
            extern = True
            self.next()
        self.expect(".shared")
        align, typ, name, count = 1, None, None, None
        while self.peek()[1] != ";":
            kind, text, line = self.next()
            if text == ".align":
                align = int(self.next()[1])
            elif text.startswith(".") and text[1:] in TYPES:
                typ = text[1:]
            elif kind == "id":
                name = text
            elif text == "[":
                count = 0 if self.peek()[1] == "]" else int(self.next()[1])
                self.expect("]")
            else:
                raise SimulationError(f"PTX line {line}: bad .shared declaration at {text!r}")
        self.next()
        if typ is None or name is None:
            self.error("a .shared declaration needs a type and a name")
        size = TYPES[typ].size * (1 if count is None else count)
        return SharedVar(name, max(align, TYPES[typ].size), 0 if extern else size, extern)

    # -- body
    def body(self, e: Entry):
        scopes: list[dict] = []
        uid = [0]

        def declare(name, typ):
            if name in scopes[-1]:
                self.error(f"register {name} declared twice")
            unique = name if len(scopes) == 1 else f"{name}#{uid[0]}"
            uid[0] += 1
            scopes[-1][name] = unique
            e.regs[unique] = typ

        def resolve(name):
            for scope in reversed(scopes):
                if name in scope:
                    return scope[name]
            return None

        self.resolve = resolve
        self.expect("{")
        scopes.append({})
        while scopes:
            kind, text, line = self.peek()
            if kind == "eof":
                self.error(f"entry {e.name}: missing closing brace")
            if text == "{":
                self.next()
                scopes.append({})
            elif text == "}":
                self.next()
                scopes.pop()
            elif text == ".reg":
                self.next()
                typ = self.next()[1].lstrip(".")
                if typ not in TYPES:
                    self.error(f"unsupported register type .{typ}")
                while True:
                    name = self.next()[1]
                    if self.peek()[1] == "<":
                        self.next()
                        n = int(self.next()[1])
                        self.expect(">")
                        for k in range(n):
                            declare(f"{name}{k}", typ)
                    else:
                        declare(name, typ)
                    if self.next()[1] == ";":
                        break
            elif text in (".shared", ".extern"):
                e.shared.append(self.shared_decl())
            elif text in (".pragma", ".maxnreg", ".loc"):
                self.skip_statement()
            elif text.startswith(".") and kind == "id":
                self.error(f"unsupported: {text}")
            elif kind == "id" and self.peek(1)[1] == ":":
                self.next()
                self.next()
                if text in e.labels:
                    self.error(f"label {text} defined twice")
                e.labels[text] = len(e.body)
            else:
                e.body.append(self.instruction())

    def instruction(self) -> Instr:
        line = self.peek()[2]
        guard = None
        if self.peek()[1] == "@":
            self.next()
            neg = False
            if self.peek()[1] == "!":
                self.next()
                neg = True
            guard = self.register(self.next()[1], neg)
        kind, text, _ = self.next()
        if kind != "id":
            raise SimulationError(f"PTX line {line}: expected an instruction, found {text!r}")
        opcode, *mods = text.split(".")
        operands = []
        while self.peek()[1] != ";":
            operands.append(self.operand())
            if self.peek()[1] == ",":
                self.next()
            elif self.peek()[1] != ";":
                self.error(f"expected ',' or ';' in {text}, found {self.peek()[1]!r}")
        self.next()
        source = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else text
        return Instr(opcode, tuple(mods), tuple(operands), guard, line, source)

    def register(self, name, neg=False):
        unique = self.resolve(name)
        if unique is None:
            self.error(f"undeclared register {name}")
        return Reg(unique, neg)

    def operand(self):
        kind, text, line = self.next()
        if text == "{":
            items = []
            while self.peek()[1] != "}":
                items.append(self.operand())
                if self.peek()[1] == ",":
                    self.next()
            self.next()
            return Vec(tuple(items))
        if text == "[":
            base, offset = None, 0
            if self.peek()[0] == "id":
                base = self.name(self.next()[1])
            elif self.peek()[0] == "num":
                offset = int(self.next()[1].rstrip("U"), 0)
            while self.peek()[1] in ("+", "-"):
                sign = -1 if self.next()[1] == "-" else 1
                if self.peek()[1] == "-":
                    self.next()
                    sign = -sign
                offset += sign * int(self.next()[1].rstrip("U"), 0)
            self.expect("]")
            return Addr(base, offset)
        if text == "!":
            return self.register(self.next()[1], True)
        if text == "-":
            return Imm("-" + self.next()[1])
        if kind == "num":
            return Imm(text)
        if kind == "id":
            first = self.name(text)
            if self.peek()[1] == "|":
                self.next()
                second = self.name(self.next()[1])
                return Pair(first, second)
            return first
        raise SimulationError(f"PTX line {line}: unexpected {text!r} in an operand")

    def name(self, text):
        if text == "_":
            return Sink()
        if text in SPECIAL_REGISTERS:
            return Special(text)
        unique = self.resolve(text)
        return Reg(unique) if unique is not None else Sym(text)


def parse(text: str) -> Module:
    """Parse PTX text into its entries (raises SimulationError naming the line on bad input)."""
    return _Parser(text).module()
