"""The Qwen3.5 hybrid (Gated DeltaNet + gated attention; Ternary Bonsai 27B, Bonsai 2), in one place.

``spec`` declares it (the ArchSpec: config parsing, tensor list, GGUF conventions from ``names``),
``model`` is its forward pass (with ``deltanet`` and the Bonsai 2 ``hadamard`` rotation), ``step`` its
fused one-token decode step, ``synthetic`` its synthetic weights. Nothing is imported here, so
reading the declaration does not load the model.
"""
