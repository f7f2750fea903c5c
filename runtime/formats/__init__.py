"""Model file formats: GGUF, Hugging Face folders and the native ``.ternary`` file.

Every reader produces one :class:`runtime.formats.model_data.ModelData`; tensor names inside it are
canonical Hugging Face names (``model.layers.0.self_attn.q_proj.weight``) whatever the source.
"""
