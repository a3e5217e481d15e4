"""Decode emitted machine code with iced-x86 (an oracle nobody here wrote)."""
import iced_x86


def decode_all(code: bytes, ip: int = 0):
    """Every instruction in `code`; fails if any byte is left undecoded or invalid."""
    dec = iced_x86.Decoder(64, code, ip=ip)
    out, total = [], 0
    for ins in dec:
        assert ins.code != iced_x86.Code.INVALID, f"invalid instruction at {ins.ip:#x}: {code[ins.ip - ip:ins.ip - ip + 16].hex()}"
        out.append(ins)
        total += ins.len
    assert total == len(code), f"decoded {total} of {len(code)} bytes"
    return out


def assert_decodes(kernel) -> None:
    """Every segment's instructions (the part before its constant pool) decode without leftovers."""
    for code in kernel.instruction_bytes():
        decode_all(code)
