"""Hand-written PTX kernels for the reference interpreter's tests.

Every kernel here is also assembled by ptxas for sm_80 and sm_90 (test_ptx_sim.py), so the
interpreter is tested on real PTX, not on a dialect of its own.
"""

HEADER = """.version 8.0
.target sm_80
.address_size 64
"""

# c[i] = a[i] + b[i] for i < n: one thread per element, a tail predicate past n.
VADD = HEADER + """
.visible .entry vadd(
    .param .u64 a,
    .param .u64 b,
    .param .u64 c,
    .param .u32 n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<11>;

    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [c];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.u32 %rd7, %r5, 4;
    add.s64 %rd8, %rd4, %rd7;
    add.s64 %rd9, %rd5, %rd7;
    add.s64 %rd10, %rd6, %rd7;
    ld.global.f32 %f1, [%rd8];
    ld.global.f32 %f2, [%rd9];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd10], %f3;
DONE:
    ret;
}
"""

# Byte permutes: out[4i + j] = prmt.b32(a[i], b[i], sel_j), four selectors (one a register);
# their nibbles pick bytes of {b, a} or, with the high bit set, replicate a byte's sign.
PRMT = HEADER + """
.visible .entry prmt(.param .u64 a, .param .u64 b, .param .u64 sel, .param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<10>;

    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [sel];
    ld.param.u64 %rd4, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd1, %rd5;
    add.s64 %rd7, %rd2, %rd5;
    add.s64 %rd8, %rd3, %rd5;
    ld.global.b32 %r2, [%rd6];
    ld.global.b32 %r3, [%rd7];
    ld.global.b32 %r4, [%rd8];
    prmt.b32 %r5, %r2, %r3, 0x5140;
    prmt.b32 %r6, %r2, %r3, 0x7362;
    prmt.b32 %r7, %r2, %r3, 0xC8A3;
    prmt.b32 %r8, %r2, %r3, %r4;
    mul.wide.u32 %rd5, %r1, 16;
    add.s64 %rd9, %rd4, %rd5;
    st.global.b32 [%rd9], %r5;
    st.global.b32 [%rd9+4], %r6;
    st.global.b32 [%rd9+8], %r7;
    st.global.b32 [%rd9+12], %r8;
    ret;
}
"""

# Divergence: odd threads take one path, even threads split again; then a loop whose trip count
# is tid % 5; threads with tid % 7 == 6 exit before storing.
#   x = odd ? 3*tid : (tid & 2 ? tid + 100 : -tid);  for i in range(tid % 5): x += i;  out[tid] = x
DIVERGE = HEADER + """
.visible .entry diverge(.param .u64 out)
{
    .reg .pred %p<5>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    rem.u32 %r9, %r1, 7;
    setp.eq.u32 %p4, %r9, 6;
    @%p4 exit;
    and.b32 %r2, %r1, 1;
    setp.ne.u32 %p1, %r2, 0;
    @!%p1 bra EVEN;
    mul.lo.s32 %r3, %r1, 3;
    bra.uni JOIN;
EVEN:
    and.b32 %r4, %r1, 2;
    setp.eq.u32 %p2, %r4, 0;
    @%p2 bra NEGATE;
    add.s32 %r3, %r1, 100;
    bra.uni JOIN;
NEGATE:
    neg.s32 %r3, %r1;
JOIN:
    rem.u32 %r5, %r1, 5;
    mov.u32 %r6, 0;
LOOP:
    setp.ge.u32 %p3, %r6, %r5;
    @%p3 bra STORE;
    add.s32 %r3, %r3, %r6;
    add.s32 %r6, %r6, 1;
    bra.uni LOOP;
STORE:
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.s32 [%rd3], %r3;
    ret;
}
"""

# Every special register, twelve u32 per thread at out[12 * global linear thread id].
SPECIALS = HEADER + """
.visible .entry specials(.param .u64 out)
{
    .reg .b32 %r<24>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %tid.y;
    mov.u32 %r3, %tid.z;
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %ctaid.y;
    mov.u32 %r6, %ctaid.z;
    mov.u32 %r7, %laneid;
    mov.u32 %r8, %warpid;
    mov.u32 %r9, %ntid.x;
    mov.u32 %r10, %ntid.y;
    mov.u32 %r11, %ntid.z;
    mov.u32 %r12, %nctaid.x;
    mov.u32 %r13, %nctaid.y;
    // linear thread id in the CTA, then in the grid
    mad.lo.s32 %r14, %r3, %r10, %r2;
    mad.lo.s32 %r14, %r14, %r9, %r1;
    mad.lo.s32 %r15, %r6, %r13, %r5;
    mad.lo.s32 %r15, %r15, %r12, %r4;
    mul.lo.s32 %r16, %r9, %r10;
    mul.lo.s32 %r16, %r16, %r11;
    mad.lo.s32 %r17, %r15, %r16, %r14;
    mul.wide.u32 %rd2, %r17, 48;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.u32 [%rd3], {%r1, %r2, %r3, %r4};
    st.global.v4.u32 [%rd3+16], {%r5, %r6, %r7, %r8};
    st.global.v4.u32 [%rd3+32], {%r9, %r12, %r10, %r13};
    ret;
}
"""

# Integer semantics: per thread i, from a[i], b[i] (s32) and x[i], y[i] (s64), 24 s32 results
# out[24 * i + k] and 6 s64 results wide[6 * i + k].
INTOPS = HEADER + """
.visible .entry intops(.param .u64 pa, .param .u64 pb, .param .u64 px, .param .u64 py,
                       .param .u64 pout, .param .u64 pwide)
{
    .reg .pred %p<4>;
    .reg .b16 %h<4>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<40>;

    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [px];
    ld.param.u64 %rd4, [py];
    ld.param.u64 %rd5, [pout];
    ld.param.u64 %rd6, [pwide];
    mul.wide.u32 %rd7, %r1, 4;
    add.s64 %rd8, %rd1, %rd7;
    ld.global.s32 %r2, [%rd8];
    add.s64 %rd8, %rd2, %rd7;
    ld.global.s32 %r3, [%rd8];
    mul.wide.u32 %rd7, %r1, 8;
    add.s64 %rd8, %rd3, %rd7;
    ld.global.s64 %rd10, [%rd8];
    add.s64 %rd8, %rd4, %rd7;
    ld.global.s64 %rd11, [%rd8];

    add.s32 %r10, %r2, %r3;
    sub.s32 %r11, %r2, %r3;
    mul.lo.s32 %r12, %r2, %r3;
    mul.hi.s32 %r13, %r2, %r3;
    mul.hi.u32 %r14, %r2, %r3;
    div.s32 %r15, %r2, %r3;
    rem.s32 %r16, %r2, %r3;
    div.u32 %r17, %r2, %r3;
    rem.u32 %r18, %r2, %r3;
    and.b32 %r19, %r3, 31;
    shl.b32 %r20, %r2, %r19;
    shr.s32 %r21, %r2, %r19;
    shr.u32 %r22, %r2, %r19;
    shr.s32 %r23, %r2, 40;
    min.s32 %r24, %r2, %r3;
    max.u32 %r25, %r2, %r3;
    setp.lt.s32 %p1, %r2, %r3;
    setp.lo.u32 %p2, %r2, %r3;
    selp.s32 %r26, 1, 0, %p1;
    selp.s32 %r27, 1, 0, %p2;
    cvt.sat.s8.s32 %r28, %r2;
    cvt.u16.u32 %h1, %r2;
    cvt.s32.s8 %r29, %h1;
    neg.s32 %r30, %r2;
    abs.s32 %r31, %r2;
    xor.b32 %r32, %r2, %r3;
    not.b32 %r33, %r32;
    mad.lo.s32 %r34, %r2, %r3, %r2;
    setp.gt.and.s32 %p3, %r2, 0, %p2;
    selp.s32 %r35, 7, -7, %p3;

    mul.wide.u32 %rd7, %r1, 96;
    add.s64 %rd8, %rd5, %rd7;
    st.global.v4.s32 [%rd8], {%r10, %r11, %r12, %r13};
    st.global.v4.s32 [%rd8+16], {%r14, %r15, %r16, %r17};
    st.global.v4.s32 [%rd8+32], {%r18, %r20, %r21, %r22};
    st.global.v4.s32 [%rd8+48], {%r23, %r24, %r25, %r26};
    st.global.v4.s32 [%rd8+64], {%r27, %r28, %r29, %r30};
    st.global.v4.s32 [%rd8+80], {%r31, %r33, %r34, %r35};

    add.s64 %rd20, %rd10, %rd11;
    mul.lo.s64 %rd21, %rd10, %rd11;
    mul.hi.s64 %rd22, %rd10, %rd11;
    mul.hi.u64 %rd23, %rd10, %rd11;
    mul.wide.s32 %rd24, %r2, %r3;
    div.s64 %rd25, %rd10, %rd11;
    mul.wide.u32 %rd7, %r1, 48;
    add.s64 %rd8, %rd6, %rd7;
    st.global.v2.s64 [%rd8], {%rd20, %rd21};
    st.global.v2.s64 [%rd8+16], {%rd22, %rd23};
    st.global.v2.s64 [%rd8+32], {%rd24, %rd25};
    ret;
}
"""

# Float semantics, per thread i from a[i], b[i], c[i] (f32): 8 f32 results f[8 * i + k] and
# 8 b32 results (conversions, packed halves) h[8 * i + k].
FLOATOPS = HEADER + """
.visible .entry floatops(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pf, .param .u64 ph)
{
    .reg .pred %p<2>;
    .reg .b16 %h<8>;
    .reg .b32 %r<24>;
    .reg .f32 %f<24>;
    .reg .b64 %rd<16>;

    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pc];
    ld.param.u64 %rd4, [pf];
    ld.param.u64 %rd5, [ph];
    mul.wide.u32 %rd6, %r1, 4;
    add.s64 %rd7, %rd1, %rd6;
    ld.global.f32 %f1, [%rd7];
    add.s64 %rd7, %rd2, %rd6;
    ld.global.f32 %f2, [%rd7];
    add.s64 %rd7, %rd3, %rd6;
    ld.global.f32 %f3, [%rd7];

    add.f32 %f4, %f1, %f2;
    mul.f32 %f5, %f1, %f2;
    fma.rn.f32 %f6, %f1, %f2, %f3;
    div.rn.f32 %f7, %f1, %f2;
    min.f32 %f8, %f1, %f2;
    max.f32 %f9, %f1, %f2;
    neg.f32 %f10, %f1;
    setp.ltu.f32 %p1, %f1, %f2;
    selp.f32 %f11, %f1, %f2, %p1;

    cvt.rn.f16.f32 %h1, %f1;
    cvt.rz.f16.f32 %h2, %f1;
    cvt.rn.bf16.f32 %h3, %f1;
    cvt.rni.s32.f32 %r2, %f1;
    cvt.rzi.s32.f32 %r3, %f1;
    cvt.rn.f16x2.f32 %r4, %f1, %f2;
    cvt.rn.bf16x2.f32 %r5, %f1, %f2;
    mov.b32 %r6, {%h1, %h2};
    cvt.f32.f16 %f12, %h1;
    cvt.rn.f32.s32 %f13, %r2;

    mul.wide.u32 %rd6, %r1, 32;
    add.s64 %rd7, %rd4, %rd6;
    st.global.v4.f32 [%rd7], {%f4, %f5, %f6, %f7};
    st.global.v4.f32 [%rd7+16], {%f8, %f9, %f10, %f11};
    add.s64 %rd7, %rd5, %rd6;
    mov.b32 %r7, {%h3, %h3};
    mov.b32 %r8, %f12;
    mov.b32 %r9, %f13;
    st.global.v4.b32 [%rd7], {%r2, %r3, %r4, %r5};
    st.global.v4.b32 [%rd7+16], {%r6, %r7, %r8, %r9};
    ret;
}
"""

# Packed half arithmetic: per thread i, 32-bit words a[i], b[i], c[i] holding two f16 (or two
# bf16) each: out[4 * i + k] = add, mul, fma (f16x2) and fma (bf16x2).
HALFOPS = HEADER + """
.visible .entry halfops(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pout)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<12>;

    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pc];
    ld.param.u64 %rd4, [pout];
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd1, %rd5;
    ld.global.b32 %r2, [%rd6];
    add.s64 %rd6, %rd2, %rd5;
    ld.global.b32 %r3, [%rd6];
    add.s64 %rd6, %rd3, %rd5;
    ld.global.b32 %r4, [%rd6];
    add.rn.f16x2 %r5, %r2, %r3;
    mul.rn.f16x2 %r6, %r2, %r3;
    fma.rn.f16x2 %r7, %r2, %r3, %r4;
    fma.rn.bf16x2 %r8, %r2, %r3, %r4;
    mul.wide.u32 %rd5, %r1, 16;
    add.s64 %rd6, %rd4, %rd5;
    st.global.v4.b32 [%rd6], {%r5, %r6, %r7, %r8};
    ret;
}
"""

# Sum of n floats per CTA through shared memory: each of 256 threads loads one element (0 past
# n), a tree of halving strides with bar.sync between levels, thread 0 stores the CTA's sum.
REDUCE = HEADER + """
.visible .entry reduce(.param .u64 pin, .param .u64 pout, .param .u32 n)
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    .shared .align 4 .f32 partial[256];

    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mad.lo.s32 %r4, %r3, 256, %r2;
    mov.f32 %f1, 0f00000000;
    setp.lt.u32 %p1, %r4, %r1;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd1, %rd3;
    @%p1 ld.global.f32 %f1, [%rd4];
    mov.u32 %r5, partial;
    shl.b32 %r6, %r2, 2;
    add.s32 %r7, %r5, %r6;
    st.shared.f32 [%r7], %f1;
    bar.sync 0;
    mov.u32 %r8, 128;
LEVEL:
    setp.ge.u32 %p2, %r2, %r8;
    @%p2 bra SKIP;
    shl.b32 %r9, %r8, 2;
    add.s32 %r10, %r7, %r9;
    ld.shared.f32 %f2, [%r10];
    ld.shared.f32 %f3, [%r7];
    add.f32 %f3, %f3, %f2;
    st.shared.f32 [%r7], %f3;
SKIP:
    bar.sync 0;
    shr.u32 %r8, %r8, 1;
    setp.ne.u32 %p3, %r8, 0;
    @%p3 bra LEVEL;
    setp.ne.u32 %p2, %r2, 0;
    @%p2 bra DONE;
    ld.shared.f32 %f2, [partial];
    mul.wide.u32 %rd5, %r3, 4;
    add.s64 %rd6, %rd2, %rd5;
    st.global.f32 [%rd6], %f2;
DONE:
    ret;
}
"""

# Faults: thread `bad` of the CTA stores one float past a 64-float shared array, or (mode 1)
# exits before a bar.sync the others wait at.
FAULTS = HEADER + """
.visible .entry faults(.param .u32 bad, .param .u32 mode)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .f32 %f<2>;
    .shared .align 4 .b8 buf[256];

    ld.param.u32 %r1, [bad];
    ld.param.u32 %r6, [mode];
    mov.u32 %r2, %tid.x;
    setp.eq.u32 %p1, %r2, %r1;
    setp.eq.u32 %p2, %r6, 1;
    @%p2 bra BARRIER;
    mov.u32 %r3, buf;
    selp.u32 %r4, 64, %r2, %p1;
    shl.b32 %r4, %r4, 2;
    add.s32 %r5, %r3, %r4;
    mov.f32 %f1, 0f3F800000;
    st.shared.f32 [%r5], %f1;
    ret;
BARRIER:
    @%p1 ret;
    bar.sync 0;
    ret;
}
"""

# An instruction outside the interpreter's subset (valid PTX all the same).
UNSUPPORTED = HEADER + """
.visible .entry unsupported(.param .u64 out)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    popc.b32 %r2, %r1;
    st.global.u32 [%rd1], %r2;
    ret;
}
"""

# cp.async staging, 64 threads, 16 bytes each.  Group 0 copies src0[16t..] (src-size clamps at
# nbytes, zero-filling the rest), group 1 copies src1[16t..] with .cg.  Per thread two 16-byte
# rows of out: its group-0 slot after wait_group 1, and the next thread's group-1 slot after
# wait_group 0 and bar.sync.  Faulty variants: mode 1 reads its slot before any wait, mode 2
# reads its group-1 slot after wait_group 1 (still in flight), mode 3 skips the bar.sync.
CPASYNC = HEADER + """
.visible .entry cpasync(.param .u64 psrc0, .param .u64 psrc1, .param .u64 pout, .param .u32 nbytes,
                        .param .u32 mode)
{
    .reg .pred %p<4>;
    .reg .b32 %r<24>;
    .reg .b64 %rd<12>;
    .shared .align 16 .b8 stage[2048];

    ld.param.u64 %rd1, [psrc0];
    ld.param.u64 %rd2, [psrc1];
    ld.param.u64 %rd3, [pout];
    ld.param.u32 %r1, [nbytes];
    ld.param.u32 %r15, [mode];
    setp.eq.u32 %p1, %r15, 1;
    setp.eq.u32 %p2, %r15, 2;
    setp.eq.u32 %p3, %r15, 3;
    mov.u32 %r2, %tid.x;
    shl.b32 %r3, %r2, 4;
    sub.s32 %r4, %r1, %r3;
    min.s32 %r4, %r4, 16;
    max.s32 %r4, %r4, 0;
    mov.u32 %r5, stage;
    add.s32 %r6, %r5, %r3;
    add.s32 %r7, %r6, 1024;
    cvt.u64.u32 %rd4, %r3;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    cp.async.ca.shared.global [%r6], [%rd5], 16, %r4;
    cp.async.commit_group;
    cp.async.cg.shared.global [%r7], [%rd6], 16;
    cp.async.commit_group;
    shl.b32 %r8, %r2, 5;
    cvt.u64.u32 %rd7, %r8;
    add.s64 %rd8, %rd3, %rd7;
    @%p1 ld.shared.v4.b32 {%r10, %r11, %r12, %r13}, [%r6];
    cp.async.wait_group 1;
    ld.shared.v4.b32 {%r10, %r11, %r12, %r13}, [%r6];
    st.global.v4.b32 [%rd8], {%r10, %r11, %r12, %r13};
    @%p2 ld.shared.v4.b32 {%r10, %r11, %r12, %r13}, [%r7];
    cp.async.wait_group 0;
    @!%p3 bar.sync 0;
    add.s32 %r14, %r2, 1;
    and.b32 %r14, %r14, 63;
    shl.b32 %r14, %r14, 4;
    add.s32 %r14, %r14, %r5;
    ld.shared.v4.b32 {%r10, %r11, %r12, %r13}, [%r14+1024];
    st.global.v4.b32 [%rd8+16], {%r10, %r11, %r12, %r13};
    ret;
}
"""

# ldmatrix, one warp: four 8x8 b16 matrices m[4][8][8] are copied to shared memory with a row
# stride of 32 bytes, lane l addressing row l%8 of matrix l/8 (lanes past the matrices an .x1
# or .x2 reads give an address outside shared memory: they must not be read).  Per lane 16 words:
# x1, x2, x4, x1.trans, x2.trans, x4.trans, and two zeros.
LDMATRIX = HEADER + """
.visible .entry ldmatrix(.param .u64 pm, .param .u64 pout)
{
    .reg .pred %p<3>;
    .reg .b32 %r<32>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 tiles[1024];

    ld.param.u64 %rd1, [pm];
    ld.param.u64 %rd2, [pout];
    mov.u32 %r1, %laneid;
    // copy row l of the 32 rows (16 bytes) into shared memory at 32 * l
    mul.wide.u32 %rd3, %r1, 16;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.v4.b32 {%r2, %r3, %r4, %r5}, [%rd4];
    mov.u32 %r6, tiles;
    shl.b32 %r7, %r1, 5;
    add.s32 %r8, %r6, %r7;
    st.shared.v4.b32 [%r8], {%r2, %r3, %r4, %r5};
    bar.sync 0;
    setp.lt.u32 %p1, %r1, 8;
    setp.lt.u32 %p2, %r1, 16;
    selp.u32 %r9, %r8, 1048560, %p1;
    selp.u32 %r10, %r8, 1048560, %p2;
    ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r11}, [%r9];
    ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r12, %r13}, [%r10];
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r14, %r15, %r16, %r17}, [%r8];
    ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%r18}, [%r9];
    ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r19, %r20}, [%r10];
    ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r21, %r22, %r23, %r24}, [%r8];
    mov.u32 %r25, 0;
    mul.wide.u32 %rd5, %r1, 64;
    add.s64 %rd6, %rd2, %rd5;
    st.global.v4.b32 [%rd6], {%r11, %r12, %r13, %r14};
    st.global.v4.b32 [%rd6+16], {%r15, %r16, %r17, %r18};
    st.global.v4.b32 [%rd6+32], {%r19, %r20, %r21, %r22};
    st.global.v4.b32 [%rd6+48], {%r23, %r24, %r25, %r25};
    ret;
}
"""


def _mma_kernel(name, opcode):
    """One mma per warp: lane l of warp w reads its A (4 words), B (2) and C (4) fragment
    registers from a[(32w + l) * 4 ..], b[(32w + l) * 2 ..], c[..] and stores D likewise."""
    return HEADER + f"""
.visible .entry {name}(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
    .reg .b32 %r<20>;
    .reg .b64 %rd<12>;

    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pc];
    ld.param.u64 %rd4, [pd];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 16;
    mul.wide.u32 %rd6, %r1, 8;
    add.s64 %rd7, %rd1, %rd5;
    ld.global.v4.b32 {{%r2, %r3, %r4, %r5}}, [%rd7];
    add.s64 %rd7, %rd2, %rd6;
    ld.global.v2.b32 {{%r6, %r7}}, [%rd7];
    add.s64 %rd7, %rd3, %rd5;
    ld.global.v4.b32 {{%r8, %r9, %r10, %r11}}, [%rd7];
    {opcode} {{%r12, %r13, %r14, %r15}}, {{%r2, %r3, %r4, %r5}}, {{%r6, %r7}}, {{%r8, %r9, %r10, %r11}};
    add.s64 %rd7, %rd4, %rd5;
    st.global.v4.b32 [%rd7], {{%r12, %r13, %r14, %r15}};
    ret;
}}
"""


MMA_F16 = _mma_kernel("mma_f16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
MMA_BF16 = _mma_kernel("mma_bf16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
MMA_S8 = _mma_kernel("mma_s8", "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32")
MMA_S8_SAT = _mma_kernel("mma_s8_sat", "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32")

# The same mma behind a guard that only some lanes of the warp pass: invalid (.aligned).
MMA_PARTIAL = MMA_F16.replace("mma_f16", "mma_partial").replace(
    "    mma.sync", "    setp.lt.u32 %p1, %r1, 16;\n    @%p1 mma.sync").replace(
    ".reg .b32 %r<20>;", ".reg .b32 %r<20>;\n    .reg .pred %p<2>;")


def _gemm_f16():
    """C[M, N] (f32) = A[M, K] @ B[K, N] (f16, row-major), M and N multiples of 64, K of 32.

    A CTA of 4 warps computes a 64x64 tile of C, each warp 32x32 as 2x4 mma.m16n8k16; per
    32-wide slice of K, cp.async stages A (64x32) and B (32x64) in shared memory, ldmatrix.x4
    reads A fragments and ldmatrix.x4.trans B fragments (B is k-major in shared memory)."""
    acc = lambda mi, ni, i: f"%acc{(mi * 4 + ni) * 4 + i}"          # noqa: E731
    zero = "\n".join(f"    mov.f32 %acc{i}, 0f00000000;" for i in range(32))
    compute = []
    for kk in (0, 16):
        compute += [
            f"    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%a0, %a1, %a2, %a3}}, [%r34+{kk * 2}];",
            f"    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%a4, %a5, %a6, %a7}}, [%r34+{1024 + kk * 2}];",
            f"    ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%b0, %b1, %b2, %b3}}, [%r36+{kk * 128}];",
            f"    ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%b4, %b5, %b6, %b7}}, [%r36+{32 + kk * 128}];",
        ]
        for mi in range(2):
            for ni in range(4):
                d = ", ".join(acc(mi, ni, i) for i in range(4))
                a = ", ".join(f"%a{4 * mi + i}" for i in range(4))
                compute.append(f"    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d}}}, {{{a}}}, "
                               f"{{%b{2 * ni}, %b{2 * ni + 1}}}, {{{d}}};")
    store = []
    for mi in range(2):
        for h in range(2):
            if mi or h:
                store.append("    add.s64 %rd13, %rd13, %rd14;")
            for ni in range(4):
                store.append(f"    st.global.v2.f32 [%rd13+{ni * 32}], {{{acc(mi, ni, 2 * h)}, {acc(mi, ni, 2 * h + 1)}}};")
    compute, store = "\n".join(compute), "\n".join(store)
    return HEADER + f"""
.visible .entry gemm_f16(.param .u64 pa, .param .u64 pb, .param .u64 pc,
                         .param .u32 M, .param .u32 N, .param .u32 K)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<64>;
    .reg .b32 %a<8>;
    .reg .b32 %b<8>;
    .reg .f32 %acc<32>;
    .reg .b64 %rd<24>;
    .shared .align 128 .b8 sA[4096];
    .shared .align 128 .b8 sB[4096];

    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pc];
    ld.param.u32 %r1, [M];
    ld.param.u32 %r2, [N];
    ld.param.u32 %r3, [K];
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %ctaid.x;
    mov.u32 %r6, %ctaid.y;
    shl.b32 %r7, %r5, 6;            // n0
    shl.b32 %r8, %r6, 6;            // m0
    shr.u32 %r9, %r4, 5;            // warp
    and.b32 %r10, %r4, 31;          // lane
    shr.u32 %r11, %r9, 1;           // warp row
    and.b32 %r12, %r9, 1;           // warp column
    mov.u32 %r13, sA;
    mov.u32 %r14, sB;
{zero}
    // A: 16-byte chunks t and t+128 of the 64x32 tile: row t/4 (+32), column (t%4)*8
    shr.u32 %r15, %r4, 2;
    and.b32 %r16, %r4, 3;
    add.s32 %r17, %r8, %r15;
    mul.lo.s32 %r18, %r17, %r3;
    shl.b32 %r19, %r16, 3;
    add.s32 %r18, %r18, %r19;
    mul.wide.u32 %rd4, %r18, 2;
    add.s64 %rd5, %rd1, %rd4;
    mul.wide.u32 %rd6, %r3, 64;
    add.s64 %rd7, %rd5, %rd6;
    shl.b32 %r20, %r15, 6;
    shl.b32 %r21, %r16, 4;
    add.s32 %r22, %r20, %r21;
    add.s32 %r22, %r22, %r13;
    add.s32 %r23, %r22, 2048;
    // B: chunks t and t+128 of the 32x64 tile: row t/8 (+16), column (t%8)*8
    shr.u32 %r24, %r4, 3;
    and.b32 %r25, %r4, 7;
    mul.lo.s32 %r26, %r24, %r2;
    add.s32 %r26, %r26, %r7;
    shl.b32 %r27, %r25, 3;
    add.s32 %r26, %r26, %r27;
    mul.wide.u32 %rd8, %r26, 2;
    add.s64 %rd9, %rd2, %rd8;
    mul.wide.u32 %rd10, %r2, 32;
    add.s64 %rd11, %rd9, %rd10;
    shl.b32 %r28, %r24, 7;
    shl.b32 %r29, %r25, 4;
    add.s32 %r30, %r28, %r29;
    add.s32 %r30, %r30, %r14;
    add.s32 %r31, %r30, 2048;
    mul.wide.u32 %rd12, %r2, 64;    // 32 rows of B, in bytes
    // ldmatrix row addresses: lane l gives row l%16, column block l/16 of its 16x16 (A) or of
    // two adjacent k16 x n8 tiles (B)
    and.b32 %r32, %r10, 15;
    shr.u32 %r33, %r10, 4;
    shl.b32 %r34, %r11, 5;
    add.s32 %r34, %r34, %r32;
    shl.b32 %r34, %r34, 6;
    shl.b32 %r35, %r33, 4;
    add.s32 %r34, %r34, %r35;
    add.s32 %r34, %r34, %r13;
    shl.b32 %r36, %r32, 7;
    shl.b32 %r37, %r12, 6;
    add.s32 %r36, %r36, %r37;
    add.s32 %r36, %r36, %r35;
    add.s32 %r36, %r36, %r14;
    mov.u32 %r38, 0;
LOOP:
    cp.async.cg.shared.global [%r22], [%rd5], 16;
    cp.async.cg.shared.global [%r23], [%rd7], 16;
    cp.async.cg.shared.global [%r30], [%rd9], 16;
    cp.async.cg.shared.global [%r31], [%rd11], 16;
    cp.async.commit_group;
    cp.async.wait_group 0;
    bar.sync 0;
{compute}
    bar.sync 0;
    add.s64 %rd5, %rd5, 64;
    add.s64 %rd7, %rd7, 64;
    add.s64 %rd9, %rd9, %rd12;
    add.s64 %rd11, %rd11, %rd12;
    add.s32 %r38, %r38, 32;
    setp.lt.u32 %p1, %r38, %r3;
    @%p1 bra LOOP;
    // C: lane (g, t) holds rows g and g+8, columns 2t, 2t+1 of each 16x8 tile
    shr.u32 %r40, %r10, 2;
    and.b32 %r41, %r10, 3;
    shl.b32 %r42, %r11, 5;
    add.s32 %r42, %r42, %r8;
    add.s32 %r42, %r42, %r40;
    shl.b32 %r43, %r12, 5;
    add.s32 %r43, %r43, %r7;
    shl.b32 %r44, %r41, 1;
    add.s32 %r43, %r43, %r44;
    mad.lo.s32 %r45, %r42, %r2, %r43;
    mul.wide.u32 %rd15, %r45, 4;
    add.s64 %rd13, %rd3, %rd15;
    mul.wide.u32 %rd14, %r2, 32;    // 8 rows of C, in bytes
{store}
    ret;
}}
"""


GEMM_F16 = _gemm_f16()

# Odds and ends, per thread t of n (= ntid.x) from x = in[t] (f32): the dynamic shared array
# (64-bit shared addresses) read back reversed after a barrier, unpacking and packing through
# a { } block whose registers shadow the outer ones, ex2/rcp/abs, a saturating cvt to u8.
MISC = """.version 8.0
.target sm_80
.address_size 64

.extern .shared .align 16 .b8 dyn[];

.visible .entry misc(.param .u64 pin, .param .u64 pout)
{
    .reg .b16 %h<3>;
    .reg .b32 %r<24>;
    .reg .f32 %f<12>;
    .reg .b64 %rd<16>;

    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ntid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.nc.f32 %f1, [%rd4];
    mov.u64 %rd5, dyn;
    add.s64 %rd6, %rd5, %rd3;
    st.shared.f32 [%rd6], %f1;
    bar.sync 0;
    sub.s32 %r3, %r2, %r1;
    sub.s32 %r3, %r3, 1;
    mul.wide.u32 %rd7, %r3, 4;
    add.s64 %rd8, %rd5, %rd7;
    ld.shared.f32 %f2, [%rd8];
    mov.b32 %r4, %f1;
    mov.u16 %h1, 7;
    {
        .reg .b16 %h<3>;
        mov.b32 {%h1, %h2}, %r4;
        mov.b32 %r5, {%h2, %h1};
    }
    cvt.u32.u16 %r6, %h1;
    mov.b64 %rd9, {%r4, %r5};
    mov.b64 {%r7, %r8}, %rd9;
    mul.f32 %f3, %f1, 0f3E800000;
    ex2.approx.ftz.f32 %f4, %f3;
    rcp.approx.f32 %f5, %f1;
    abs.f32 %f6, %f1;
    mul.f32 %f7, %f1, 0f42C80000;
    cvt.rzi.s32.f32 %r9, %f7;
    cvt.sat.u8.s32 %r10, %r9;
    mov.b32 %r11, %f4;
    mov.b32 %r12, %f5;
    mov.b32 %r13, %f6;
    mov.b32 %r14, %f2;
    mul.wide.u32 %rd10, %r1, 48;
    add.s64 %rd11, %rd2, %rd10;
    st.global.v4.b32 [%rd11], {%r14, %r5, %r6, %r7};
    st.global.v4.b32 [%rd11+16], {%r8, %r11, %r12, %r13};
    st.global.v2.b32 [%rd11+32], {%r10, %r9};
    ret;
}
"""

# Rounding modes of cvt: per thread, from x = fx[i] (f32) and n = ix[i] (s32), twelve halves
# (f16 and bf16 by rn, rz, rm, rp, then f16 rn.relu, bf16 rn.relu, two zeros) in six words and
# n converted to f32 by rn, rz, rm, rp in words 6 to 9.
CVT_MODES = HEADER + """
.visible .entry cvt_modes(.param .u64 pfx, .param .u64 pix, .param .u64 pout)
{
    .reg .b16 %h<13>;
    .reg .b32 %r<16>;
    .reg .f32 %f<6>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [pfx];
    ld.param.u64 %rd2, [pix];
    ld.param.u64 %rd3, [pout];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.f32 %f1, [%rd5];
    add.s64 %rd5, %rd2, %rd4;
    ld.global.s32 %r2, [%rd5];
    cvt.rn.f16.f32 %h1, %f1;
    cvt.rz.f16.f32 %h2, %f1;
    cvt.rm.f16.f32 %h3, %f1;
    cvt.rp.f16.f32 %h4, %f1;
    cvt.rn.bf16.f32 %h5, %f1;
    cvt.rz.bf16.f32 %h6, %f1;
    cvt.rm.bf16.f32 %h7, %f1;
    cvt.rp.bf16.f32 %h8, %f1;
    cvt.rn.relu.f16.f32 %h9, %f1;
    cvt.rn.relu.bf16.f32 %h10, %f1;
    mov.b16 %h11, 0;
    cvt.rn.f32.s32 %f2, %r2;
    cvt.rz.f32.s32 %f3, %r2;
    cvt.rm.f32.s32 %f4, %r2;
    cvt.rp.f32.s32 %f5, %r2;
    mov.b32 %r3, {%h1, %h2};
    mov.b32 %r4, {%h3, %h4};
    mov.b32 %r5, {%h5, %h6};
    mov.b32 %r6, {%h7, %h8};
    mov.b32 %r7, {%h9, %h10};
    mov.b32 %r8, {%h11, %h11};
    mov.b32 %r9, %f2;
    mov.b32 %r10, %f3;
    mov.b32 %r11, %f4;
    mov.b32 %r12, %f5;
    mul.wide.u32 %rd6, %r1, 48;
    add.s64 %rd7, %rd3, %rd6;
    st.global.v4.b32 [%rd7], {%r3, %r4, %r5, %r6};
    st.global.v4.b32 [%rd7+16], {%r7, %r8, %r9, %r10};
    st.global.v4.b32 [%rd7+32], {%r11, %r12, %r8, %r8};
    ret;
}
"""

# A bra.uni whose predicate differs between threads: .uni promises it does not.
BRA_UNI_DIVERGES = HEADER + """
.visible .entry bra_uni(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 5;
    @%p1 bra.uni SKIP;
    st.global.u32 [%rd1], %r1;
SKIP:
    ret;
}
"""

# CTA c stores c at out[c * stride + tid]: with stride < ntid neighbouring CTAs overlap.
OVERLAP = HEADER + """
.visible .entry overlap(.param .u64 out, .param .u32 stride)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [stride];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r2, %r1, %r3;
    mul.wide.u32 %rd2, %r4, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}
"""

# out[tid] = in[tid] + 1, then out[tid] read back through the non-coherent cache (which may
# return the value from before the store): in[tid] + 1 again when the two arrays differ.
NC_AFTER_STORE = HEADER + """
.visible .entry nc_after_store(.param .u64 pin, .param .u64 pout, .param .u64 pcheck)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    ld.param.u64 %rd3, [pcheck];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.nc.u32 %r2, [%rd5];
    add.s32 %r3, %r2, 1;
    add.s64 %rd6, %rd2, %rd4;
    st.global.u32 [%rd6], %r3;
    add.s64 %rd7, %rd3, %rd4;
    ld.global.nc.u32 %r4, [%rd7];
    st.global.u32 [%rd6], %r4;
    ret;
}
"""

# The ldmatrix kernel with a divergent branch before the collectives: odd lanes take a detour,
# and the warp must be whole again at the ldmatrix.
LDMATRIX_AFTER_DIVERGENCE = LDMATRIX.replace("entry ldmatrix(", "entry ldmatrix_diverged(").replace(
    "    bar.sync 0;\n",
    "    bar.sync 0;\n    and.b32 %r26, %r1, 1;\n    setp.eq.u32 %p1, %r26, 0;\n    @%p1 bra EVENS;\n"
    "    add.u32 %r27, %r26, %r1;\nEVENS:\n")
