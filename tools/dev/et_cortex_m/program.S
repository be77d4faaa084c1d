/* The .pte the probe loads, embedded in a section of its own (not counted as runtime). */
    .section .models, "a"
    .balign 64
    .global pte_start
pte_start:
    .incbin PTE_PATH
    .global pte_end
pte_end:
