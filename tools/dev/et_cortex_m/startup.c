/* Cortex-M4F startup for the ExecuTorch probes on QEMU mps2-an386: the vector table (initial
 * stack, reset, and SysTick, whose wraps the run probe counts), FPU on, then newlib's
 * semihosting crt0 (rdimon: .bss cleared, main, exit through semihosting so QEMU returns
 * main's status). */
extern void _start(void);
extern char __stack_top[];

volatile unsigned systick_wraps;

void reset(void) {
  /* CPACR: full access to CP10 and CP11 (the FPU), as -mfloat-abi=hard code needs. */
  *(volatile unsigned *)0xE000ED88 |= 0xFu << 20;
  __asm volatile("dsb\n isb");
  _start();
}

static void systick(void) { systick_wraps++; }

static void hang(void) {
  for (;;) {
  }
}

__attribute__((section(".vectors"), used)) static void *const vectors[16] = {
    __stack_top, (void *)reset, (void *)hang, (void *)hang, (void *)hang, (void *)hang,
    (void *)hang, 0, 0, 0, 0, (void *)hang, (void *)hang, 0, (void *)hang, (void *)systick};
