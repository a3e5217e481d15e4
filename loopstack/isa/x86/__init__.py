"""x86-64: operands, the instruction-form table, encoders and the assembler."""
