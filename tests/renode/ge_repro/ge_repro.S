@ Renode 1.15.3: SSUB8/USUB8 GE flags, MSR/MRS APSR.GE, UHADD8. Cortex-M4 (ARMv7E-M), Thumb-2.
@ Results at 0x20000000.., read them with `sysbus ReadDoubleWord`. Expected values (ARMv7-M
@ ARM DDI 0403E, A7.7.130 SSUB8 / A7.7.112 SEL / A7.7.183 USUB8 / A7.7.175 UHADD8, and QEMU 10):
@  [0] ssub8+sel max(0x05050505, 0x01010101)  = 0x05050505   (lanes 5-1 = 4 >= 0: GE = 1111)
@  [1] usub8+sel  (0x05050505, 0x01010101)    = 0x05050505   (no borrow: GE = 1111)
@  [2] msr APSR_nzcvqg (GE=0101) ; sel 0x11223344, 0xAABBCCDD = 0xAA22CC44
@  [3] msr APSR_nzcvqg (GE=0101) ; mrs APSR   = 0x00050000
@  [4] uhadd8 0x00007F00, 0                   = 0x00003F00   (lane 1: (0x7F + 0) >> 1)
    .syntax unified
    .cpu cortex-m4
    .thumb
    .section .vectors, "a"
    .word 0x20010000
    .word reset + 1          @ (Thumb)
    .text
    .thumb_func
reset:
    ldr   r7, =0x20000000
    ldr   r0, =0x05050505
    ldr   r1, =0x01010101
    ssub8 r2, r0, r1
    sel   r3, r0, r1
    str   r3, [r7, #0]
    usub8 r2, r0, r1
    sel   r3, r0, r1
    str   r3, [r7, #4]
    mov   r4, #0x00050000
    msr   APSR_nzcvqg, r4
    ldr   r0, =0x11223344
    ldr   r1, =0xAABBCCDD
    sel   r3, r0, r1
    str   r3, [r7, #8]
    msr   APSR_nzcvqg, r4
    mrs   r3, APSR
    str   r3, [r7, #12]
    ldr   r0, =0x00007F00
    mov   r1, #0
    uhadd8 r3, r0, r1
    str   r3, [r7, #16]
    ldr   r3, =0xD0E0D0E0
    str   r3, [r7, #20]
done:
    b     done
    .ltorg
