"""AArch64 (A64) machine code: the instruction-form table, its encoder and the assembler."""
