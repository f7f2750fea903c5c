"""Synthetic models with the exact Ternary-Bonsai shapes and random ternary weights.

Why: speed and memory must be measured on the real shapes (151,669-row embedding, 28-36 layers)
without downloading gigabytes, and a benchmark must be reproducible bit for bit. Every tensor is
drawn from its own generator seeded by ``(seed, tensor name)``, so a tensor's values do not depend
on which other tensors were generated or in what order, and :func:`synthetic_tensors` can stream a
model one tensor at a time (the 27B is ~7 GB packed; nothing is generated until asked).

The weights are random: codes uniform over {-1, 0, +1} (so ~1/3 zeros), fp16 group scales of
about ``1/sqrt(2/3 * fan_in)`` (0.01-0.05 for Bonsai widths) so activations stay O(1) through all
layers, norm weights ~1.0. The tokenizer is a byte-level BPE with 256 byte tokens and no merges
plus Qwen's chat special tokens, so any text round-trips; generated text is meaningless.

Per-architecture tensor lists live in :data:`TENSOR_SPECS` (``"qwen3"`` here; the hybrid
``"qwen35"`` list is added by the 27B work).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from runtime.errors import UnsupportedModelError
from runtime.formats import codecs
from runtime.formats.model_data import (
    T2,
    T3,
    DenseTensor,
    ModelData,
    Provenance,
    Tensor,
    TernaryTensor,
    TokenizerData,
)
from runtime.model.config import SYNTHETIC_CONFIGS, ModelConfig

DEFAULT_GROUP_SIZE = 128
# Rows generated per chunk: bounds the temporary int64 index tensor to ~64 MB for any width.
_CHUNK_ELEMS = 8 * 1024 * 1024


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a synthetic model: ``kind`` is "ternary" (2-D) or "norm" (1-D, ~1.0)."""

    name: str
    kind: str
    shape: tuple[int, ...]


def qwen3_tensor_specs(cfg: ModelConfig) -> list[TensorSpec]:
    """Canonical (Hugging Face) tensor names and shapes of a Qwen3 dense model."""
    h, hd = cfg.hidden_size, cfg.head_dim
    q_out, kv_out = cfg.num_heads * hd, cfg.num_kv_heads * hd
    specs = [TensorSpec("model.embed_tokens.weight", "ternary", (cfg.vocab_size, h))]
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        specs += [
            TensorSpec(p + "input_layernorm.weight", "norm", (h,)),
            TensorSpec(p + "self_attn.q_proj.weight", "ternary", (q_out, h)),
            TensorSpec(p + "self_attn.k_proj.weight", "ternary", (kv_out, h)),
            TensorSpec(p + "self_attn.v_proj.weight", "ternary", (kv_out, h)),
            TensorSpec(p + "self_attn.o_proj.weight", "ternary", (h, q_out)),
            TensorSpec(p + "self_attn.q_norm.weight", "norm", (hd,)),
            TensorSpec(p + "self_attn.k_norm.weight", "norm", (hd,)),
            TensorSpec(p + "post_attention_layernorm.weight", "norm", (h,)),
            TensorSpec(p + "mlp.gate_proj.weight", "ternary", (cfg.intermediate_size, h)),
            TensorSpec(p + "mlp.up_proj.weight", "ternary", (cfg.intermediate_size, h)),
            TensorSpec(p + "mlp.down_proj.weight", "ternary", (h, cfg.intermediate_size)),
        ]
    specs.append(TensorSpec("model.norm.weight", "norm", (h,)))
    if not cfg.tie_word_embeddings:
        specs.append(TensorSpec("lm_head.weight", "ternary", (cfg.vocab_size, h)))
    return specs


# arch -> tensor list. The qwen35 hybrid entry is registered by the 27B work.
def _qwen35_tensor_specs(cfg: ModelConfig) -> list[TensorSpec]:
    from runtime.model.qwen35_synthetic import qwen35_tensor_specs  # lazy: it imports this module

    return qwen35_tensor_specs(cfg)


TENSOR_SPECS: dict[str, Callable[[ModelConfig], list[TensorSpec]]] = {
    "qwen3": qwen3_tensor_specs,
    "qwen35": _qwen35_tensor_specs,
}

# byte value -> packed t2 byte, for the 81 bytes whose four codes are all in {0, 1, 2}
_T2_TERNARY_BYTES = torch.tensor(
    [a | (b << 2) | (c << 4) | (d << 6) for d in range(3) for c in range(3) for b in range(3) for a in range(3)],
    dtype=torch.uint8,
)


def _generator(seed: int, name: str) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed((int(seed) * 1_000_003 + zlib.crc32(name.encode())) & 0x7FFF_FFFF_FFFF_FFFF)
    return g


def random_ternary(name: str, shape: tuple[int, int], seed: int = 0, group_size: int = DEFAULT_GROUP_SIZE,
                   encoding: str = T2) -> TernaryTensor:
    """A random ternary matrix (uniform codes, fan-in-scaled fp16 scales), deterministic per name."""
    rows, cols = shape
    if cols % group_size or group_size % 4:
        raise ValueError(f"{name}: width {cols} / group size {group_size} do not fit the t2 layout")
    g = _generator(seed, name)
    nb = cols // 4
    packed = torch.empty(rows, nb, dtype=torch.uint8)
    step = max(1, _CHUNK_ELEMS // nb)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        idx = torch.randint(0, 81, (r1 - r0, nb), generator=g, dtype=torch.int64)
        packed[r0:r1] = _T2_TERNARY_BYTES[idx]
    base = (1.5 / cols) ** 0.5  # 1/sqrt(2/3 * fan_in): each output has ~O(1) magnitude for O(1) input
    jitter = torch.rand(rows, cols // group_size, generator=g) + 0.5  # U(0.5, 1.5)
    scales = (jitter * base).to(torch.float16)
    t = TernaryTensor((rows, cols), group_size, packed, scales, T2)
    return to_encoding(t, encoding)


def to_encoding(t: TernaryTensor, encoding: str) -> TernaryTensor:
    """Same weights in another canonical encoding ("t2" <-> "t3"), converted in row chunks."""
    if t.encoding == encoding:
        return t
    if encoding not in (T2, T3):
        raise ValueError(f"unknown ternary encoding {encoding!r}")
    rows, cols = t.shape
    step = max(1, _CHUNK_ELEMS // cols)
    parts = []
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        part = TernaryTensor((r1 - r0, cols), t.group_size, t.codes[r0:r1], t.scales[r0:r1], t.encoding)
        codes = codecs.codes_of(part)
        parts.append(codecs.pack_t2(codes) if encoding == T2 else codecs.pack_t3(codes, t.group_size))
    return TernaryTensor(t.shape, t.group_size, torch.cat(parts), t.scales, encoding)


def _random_norm(name: str, shape: tuple[int, ...], seed: int) -> DenseTensor:
    g = _generator(seed, name)
    return DenseTensor(1.0 + 0.05 * torch.randn(shape, generator=g, dtype=torch.float32))


def synthetic_config(name: str) -> ModelConfig:
    """A copy of ``SYNTHETIC_CONFIGS[name]`` (callers may tweak it without touching the table)."""
    if name not in SYNTHETIC_CONFIGS:
        raise UnsupportedModelError(
            f"unknown synthetic model {name!r}; choose one of: {', '.join(SYNTHETIC_CONFIGS)}")
    return ModelConfig.from_dict(SYNTHETIC_CONFIGS[name].to_dict())


def synthetic_tensors(cfg: ModelConfig, seed: int = 0, encoding: str = T2,
                      group_size: int = DEFAULT_GROUP_SIZE) -> Iterator[tuple[str, Tensor]]:
    """Yield ``(name, tensor)`` one at a time, so a writer can stream a large model to disk."""
    if cfg.arch == "qwen35":  # keep-list tensors (BF16 a/b, conv, A, dt_bias) have their own kinds
        from runtime.model.qwen35_synthetic import qwen35_synthetic_tensors

        yield from qwen35_synthetic_tensors(cfg, seed, encoding, group_size)
        return
    if cfg.arch not in TENSOR_SPECS:
        raise UnsupportedModelError(
            f"no synthetic tensor list for architecture {cfg.arch!r} (have: {', '.join(TENSOR_SPECS)})")
    for spec in TENSOR_SPECS[cfg.arch](cfg):
        if spec.kind == "ternary":
            yield spec.name, random_ternary(spec.name, spec.shape, seed, group_size, encoding)  # type: ignore[arg-type]
        elif spec.kind == "norm":
            yield spec.name, _random_norm(spec.name, spec.shape, seed)
        else:
            raise ValueError(f"unknown synthetic tensor kind {spec.kind!r} for {spec.name}")


# Qwen's chat special tokens, placed right after the 256 byte tokens.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def byte_level_tokenizer_json() -> str:
    """``tokenizer.json`` text of a byte-level BPE: 256 byte tokens (id == byte), no merges, chat specials.

    Normalizer and pre-tokenizer are Qwen2's (NFC, Qwen2 split regex, ByteLevel), so the GGUF
    writer names it ``qwen2`` and llama.cpp loads it like a real Bonsai vocabulary.
    """
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from runtime.formats.gguf_tokenizer import PRE_TOKENIZERS

    byte_to_char = _bytes_to_unicode()
    vocab = {byte_to_char[b]: b for b in range(256)}
    if set(vocab) != set(pre_tokenizers.ByteLevel.alphabet()):
        raise AssertionError("byte alphabet mismatch with tokenizers' ByteLevel")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    doc = json.loads(tok.to_str())
    normalizer, pre_tokenizer, _ignore_merges = PRE_TOKENIZERS["qwen2"]
    doc["normalizer"], doc["pre_tokenizer"] = normalizer, pre_tokenizer
    return json.dumps(doc, ensure_ascii=False)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the ByteLevel pre-tokenizer's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def synthetic_tokenizer() -> TokenizerData:
    ids = {t: 256 + i for i, t in enumerate(SPECIAL_TOKENS)}
    return TokenizerData(
        tokenizer_json=byte_level_tokenizer_json(),
        bos_token_id=None,
        eos_token_ids=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        add_bos_token=False,
        chat_template=CHATML_TEMPLATE,
    )


def synthetic_model(name: str, seed: int = 0, encoding: str | None = None,
                    group_size: int = DEFAULT_GROUP_SIZE) -> ModelData:
    """The whole synthetic model ``name`` (a key of ``SYNTHETIC_CONFIGS``) in memory.

    ``encoding`` defaults to "t3" (the ~1.75-bit base-3 packing) for ``*-ptq1`` models, else "t2".
    """
    if encoding is None:
        encoding = T3 if name.endswith("-ptq1") else T2
    cfg = synthetic_config(name)
    tensors = dict(synthetic_tensors(cfg, seed, encoding, group_size))
    return ModelData(
        config=cfg,
        tensors=tensors,
        tokenizer=synthetic_tokenizer(),
        generation_defaults={"temperature": 0.5, "top_p": 0.85, "top_k": 20},
        provenance=Provenance(source_name=f"synthetic:{name}:seed={seed}:g{group_size}", source_format="synthetic"),
        name=f"synthetic-{name}",
    )
