/* PTX of the kernels the graph capture and graph memory clients launch. */
#ifndef GPUPOOL_TESTS_ADDTO_FILL_PTX_H
#define GPUPOOL_TESTS_ADDTO_FILL_PTX_H

/* addto(w, y, n): w[i] += y[i] (u32, wrapping).  fill(w, v, n): w[i] = v. */
static const char k_ptx[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry addto(.param .u64 w, .param .u64 y, .param .u32 n)\n{\n"
    "  .reg .pred %p<2>;\n  .reg .b32 %r<10>;\n  .reg .b64 %rd<8>;\n"
    "  ld.param.u64 %rd1, [w];\n  ld.param.u64 %rd2, [y];\n  ld.param.u32 %r2, [n];\n"
    "  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n  mad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r2;\n  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n  cvta.to.global.u64 %rd2, %rd2;\n"
    "  mul.wide.u32 %rd3, %r6, 4;\n  add.s64 %rd4, %rd1, %rd3;\n  add.s64 %rd5, %rd2, %rd3;\n"
    "  ld.global.u32 %r7, [%rd4];\n  ld.global.u32 %r8, [%rd5];\n"
    "  add.s32 %r9, %r7, %r8;\n  st.global.u32 [%rd4], %r9;\n"
    "DONE:\n  ret;\n}\n"
    ".visible .entry fill(.param .u64 w, .param .u32 v, .param .u32 n)\n{\n"
    "  .reg .pred %p<2>;\n  .reg .b32 %r<10>;\n  .reg .b64 %rd<8>;\n"
    "  ld.param.u64 %rd1, [w];\n  ld.param.u32 %r1, [v];\n  ld.param.u32 %r2, [n];\n"
    "  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n  mad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r2;\n  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n  mul.wide.u32 %rd3, %r6, 4;\n  add.s64 %rd4, %rd1, %rd3;\n"
    "  st.global.u32 [%rd4], %r1;\n"
    "DONE:\n  ret;\n}\n";

#endif
