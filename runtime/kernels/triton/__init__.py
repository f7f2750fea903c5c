"""The Triton (CUDA) kernels, one module per role; docs/kernels.md describes each and how to add one.

``launch`` and ``pdl`` are the plumbing every kernel shares, ``packing`` the in-kernel decoding of the packed
ternary layouts and the int8 activation planes, ``matvec`` (decode) and ``gemm`` (prefill) the ternary
matmuls, ``tuning`` their measured launch configs, ``backend`` the ``"triton"`` linear backend; ``norm``,
``rope``, ``attention``, ``sampling``, ``gather`` and ``deltanet`` the fused ops of the decode steps.
"""
