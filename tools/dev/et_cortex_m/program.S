/* What the probes load, embedded in a section of their own (not counted as runtime): the
 * .pte, and for the run probe its input and ExecuTorch's golden output. */
    .section .models, "a"
    .balign 64
    .global pte_start, pte_end, input_start, input_end, expected_start, expected_end
pte_start:
    .incbin PTE_PATH
pte_end:
    .balign 64
input_start:
    .incbin INPUT_PATH
input_end:
    .balign 64
expected_start:
    .incbin EXPECTED_PATH
expected_end:
