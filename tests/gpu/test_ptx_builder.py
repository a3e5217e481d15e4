"""The PTX builder and the mma table: checked forms, generated declarations, ptxas as the oracle."""
import pytest

from loopstack.errors import EncodingError
from loopstack.isa.ptx import ptxas
from loopstack.isa.ptx.builder import Addr, KernelBuilder, Label, SpecialReg, Vec, check
from loopstack.isa.ptx.mma import MMA_SHAPES, MmaShape, mma_for

needs_ptxas = pytest.mark.skipif(ptxas.ptxas_path() is None, reason="ptxas is not on the PATH")


def test_mma_rows_tile_their_operands_and_name_their_instruction():
    names = {row.opcode() for row in MMA_SHAPES}
    assert names == {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                     "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                     "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
                     "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
                     "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32",
                     "mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32",
                     "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32"}
    assert mma_for("uint8", "int8").label == "u8.s8" and mma_for("uint8").label == "u8"
    for row in MMA_SHAPES:
        for op, (r, c) in (("a", (row.m, row.k)), ("b", (row.k, row.n)), ("c", (row.m, row.n))):
            cells = {row.layout(op)(lane, i) for lane in range(32) for i in range(row.elements(op))}
            assert len(cells) == r * c
    # spot checks against the PTX ISA's figures: lane 5 is g=1, t=1
    f16 = mma_for("float16")
    assert f16.a_layout(5, 0) == (1, 2) and f16.a_layout(5, 3) == (9, 3) and f16.a_layout(5, 7) == (9, 11)
    assert f16.b_layout(5, 2) == (10, 1) and f16.c_layout(5, 3) == (9, 3)
    tf32 = mma_for("float32")        # A (g, t), (g+8, t), (g, t+4), (g+8, t+4); B (t, g), (t+4, g)
    assert [tf32.a_layout(5, i) for i in range(4)] == [(1, 1), (9, 1), (1, 5), (9, 5)]
    assert [tf32.b_layout(5, i) for i in range(2)] == [(1, 1), (5, 1)]
    s8 = mma_for("int8")
    assert s8.a_layout(5, 4) == (9, 4) and s8.a_layout(5, 15) == (9, 23) and s8.b_layout(5, 7) == (23, 1)


def test_a_row_whose_layout_does_not_tile_is_rejected():
    with pytest.raises(ValueError, match="a layout"):
        MmaShape("m16n8k16", "f16", "f32", 16, 8, 16, (4, 2, 4), lambda lane, i: (0, 0),
                 MMA_SHAPES[0].b_layout, MMA_SHAPES[0].c_layout)


def test_unknown_dtype_has_no_mma_form():
    with pytest.raises(Exception, match="no mma.sync form multiplies float64"):
        mma_for("float64")
    with pytest.raises(Exception, match="no mma.sync form multiplies float16 by int8"):
        mma_for("float16", "int8")
    assert mma_for("float32").opcode() == "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"


@pytest.mark.parametrize("opcode, operands, message", [
    ("add.f64x", ("d", "a", "b"), "type .f64x not allowed"),
    ("frob.u32", (), "no such instruction"),
    ("setp.s32", (), "needs one of"),
    ("add.s32", (1, 2), "3 operands expected"),
    ("add.nope.s32", (1, 2, 3), "modifier .nope"),
])
def test_malformed_opcodes_are_named(opcode, operands, message):
    with pytest.raises(EncodingError, match=message):
        check(opcode, operands)


def test_register_widths_and_kinds_are_checked():
    k = KernelBuilder("t")
    r, f, d, p = k.reg("u32"), k.reg("f32"), k.reg("u64"), k.reg("pred")
    with pytest.raises(EncodingError, match="does not fit .u32"):
        k.ins("add.u32", d, r, r)
    with pytest.raises(EncodingError, match="predicate register is needed"):
        k.ins("setp.lt.u32", r, r, 1)
    with pytest.raises(EncodingError, match="memory address"):
        k.ins("ld.global.f32", f, d)
    with pytest.raises(EncodingError, match="vector of 4 registers"):
        k.ins("ld.global.v4.f32", f, Addr(d))
    with pytest.raises(EncodingError, match="does not fit .u64"):
        k.ins("ld.global.u64", r, Addr(d))
    with pytest.raises(EncodingError, match="is not a predicate"):
        k.ins("add.u32", r, r, 1, pred=r)
    with pytest.raises(EncodingError, match="size 8 not in"):
        k.cp_async(Addr(r), Addr(d), 8, cache="cg")
    with pytest.raises(EncodingError, match="operand a needs 4 b32"):
        k.mma(MMA_SHAPES[0], k.regs("f32", 4), k.regs("f32", 4), k.regs("b32", 2), k.regs("f32", 4))
    k.ins("mul.wide.u32", d, r, 4)            # a wide product is twice the type's width
    assert k.body[-1].strip() == "mul.wide.u32 %rd0, %r0, 4;"


def test_declarations_cover_every_register_used():
    k = KernelBuilder("t", "sm_80")
    for t in ("u32", "f32", "u64", "pred", "b16", "b32"):
        k.reg(t)
    text = k.text()
    for decl in (".reg .b32 %r<2>;", ".reg .f32 %f<1>;", ".reg .b64 %rd<1>;", ".reg .pred %p<1>;",
                 ".reg .b16 %h<1>;"):
        assert decl in text
    assert text.startswith(".version 8.0\n.target sm_80\n.address_size 64")


def _every_form(target: str) -> str:
    """A kernel using each instruction shape the backend emits (it is assembled, not run)."""
    k = KernelBuilder("forms", target)
    k.param("u64", "p")
    raw = k.ld_param("u64", "p")
    g = k.reg("u64")
    k.ins("cvta.to.global.u64", g, raw)
    k.extern_shared("smem", 128)
    sm = k.reg("u32")
    k.ins("mov.u32", sm, "smem")
    tid = k.special("%tid.x")
    lane = k.reg("u32")
    k.ins("mov.u32", lane, SpecialReg("%laneid"))
    p, q = k.reg("pred"), k.reg("pred")
    k.ins("setp.lt.u32", p, tid, 64)
    k.ins("setp.ge.and.s32", q, tid, 3, p)
    i, j = k.reg("s32"), k.reg("u32")
    for op in ("add", "sub", "min", "max", "div", "rem"):
        k.ins(f"{op}.s32", i, tid, 7)
    k.ins("mul.lo.s32", i, i, 3)
    k.ins("mad.lo.u32", j, tid, 5, j)
    k.ins("shl.b32", j, j, 2)
    k.ins("shr.u32", j, j, 1)
    for op in ("and", "or", "xor"):
        k.ins(f"{op}.b32", j, j, 0xFF)
    k.ins("selp.u32", j, j, 0, q)
    w = k.reg("u64")
    k.ins("mad.wide.u32", w, j, 4, g)
    f = k.reg("f32")
    k.ins("ld.global.f32", f, Addr(w, 16), pred=p)
    v4 = k.regs("f32", 4)
    k.ins("ld.global.v4.f32", Vec(tuple(v4)), Addr(g))
    k.ins("fma.rn.f32", f, v4[0], v4[1], f)
    for op in ("add", "sub", "mul", "max", "min"):
        k.ins(f"{op}.f32", f, f, 0.5)
    k.ins("neg.f32", f, f)
    h, h2 = k.reg("b16"), k.reg("b16")
    k.ins("cvt.rn.f16.f32", h, f)
    k.ins("cvt.rn.bf16.f32", h2, f)
    k.ins("cvt.f32.f16", f, h)
    k.ins("cvt.f32.bf16", f, h2)
    packed = k.reg("b32")
    k.ins("mov.b32", packed, Vec((h, h2)))
    k.ins("cvt.rn.f32.s32", f, i)
    k.ins("cvt.rni.s32.f32", i, f)
    k.ins("cvt.sat.s8.s32", i, i)
    k.ins("st.global.s8", Addr(w), i)
    k.ins("st.global.b16", Addr(w, 2), h)
    k.ins("st.global.v2.f32", Addr(w, 8), Vec((f, f)))
    size = k.reg("u32")
    k.ins("selp.u32", size, 16, 0, p)
    k.cp_async(Addr(sm, 0), Addr(g), 16, src_size=size)
    k.cp_async(Addr(sm, 16), Addr(g), 8)
    k.cp_async(Addr(sm, 32), Addr(g), 4, src_size=4)
    k.cp_async_commit()
    k.cp_async_wait(0)
    k.bar_sync()
    for n in (1, 2, 4):
        for trans in (False, True):
            k.ldmatrix(k.regs("b32", n), Addr(sm, 64), trans=trans)
    for row in MMA_SHAPES:
        acc = k.regs(row.acc, 4)
        for r in acc:
            k.ins(f"mov.{row.acc}", r, 0)
        k.mma(row, acc, k.regs("b32", 4), k.regs("b32", 2), acc)
    b8 = k.reg("u32")
    k.ins("ld.shared.u8", b8, Addr(sm, 3))
    top = k.label("loop")
    k.place(top)
    k.ins("add.u32", j, j, 1)
    k.ins("bra.uni", top, pred=q, negate=True)
    k.ins("bra", Label(top.name), pred=p)
    k.ins("ret")
    return k.text()


@needs_ptxas
@pytest.mark.parametrize("target, archs", [("sm_80", ("sm_80", "sm_90")), ("sm_90", ("sm_90",))])
def test_every_form_assembles(target, archs):
    text = _every_form(target)
    for arch in archs:
        ptxas.assemble(text, arch)


@needs_ptxas
def test_ptxas_errors_are_loopstack_errors_and_merge_renames_entries():
    text = _every_form("sm_80")
    merged = ptxas.merge([text, text])
    assert ".visible .entry forms_0(" in merged and ".visible .entry forms_1(" in merged
    assert merged.count(".extern .shared") == 1
    ptxas.assemble(merged, "sm_80")
    with pytest.raises(EncodingError, match="ptxas -arch=sm_80 rejected"):
        ptxas.assemble(text.replace("ret;", "frobnicate;"), "sm_80")
