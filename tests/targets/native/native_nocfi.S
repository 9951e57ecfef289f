/* SPDX-License-Identifier: Apache-2.0 */
/* A function that nothing describes: no .cfi directives (so the assembler
 * emits no FDE for it, checked by the build with readelf) and no frame
 * pointer, in a section of its own. It calls malloc with 24 bytes of its
 * own frame on the stack, so neither "CFA = rsp + 8" nor a frame-pointer
 * guess finds its return address: an unwinder must stop here
 * (tests/integration/native_stacks_test.cc, truncated "no_cfi").
 *
 *   void *nocfi_call_malloc(size_t size);
 */
        .section .text.nocfi,"ax",@progbits
        .globl  nocfi_call_malloc
        .type   nocfi_call_malloc, @function
        .p2align 4
nocfi_call_malloc:
        subq    $24, %rsp       /* rsp is 16-byte aligned at the call */
        call    malloc@PLT
        addq    $24, %rsp
        ret
        .size   nocfi_call_malloc, .-nocfi_call_malloc

        .section .note.GNU-stack,"",@progbits
