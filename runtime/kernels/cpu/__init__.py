"""CPU matmul backends: ``ternary`` (the C kernels in this folder, one build per instruction set,
chosen at run time) and ``int4`` (torch's int4 kernel, the fallback when no C compiler exists)."""
