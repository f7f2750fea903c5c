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

The tensor list (names, shapes, roles) is the architecture's own
(:meth:`runtime.formats.arch.ArchSpec.tensor_list`); this module only draws values per role.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Mapping

import torch

from runtime.errors import UnsupportedModelError
from runtime.formats import codecs
from runtime.formats.arch import TERNARY, TensorInfo, get_arch, known_arch_names
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
from runtime.tokenizer import byte_level_alphabet

DEFAULT_GROUP_SIZE = 128
# Rows generated per chunk: bounds the temporary int64 index tensor to ~64 MB for any width.
_CHUNK_ELEMS = 8 * 1024 * 1024


TensorSpec = TensorInfo  # one tensor of a synthetic model: name, role ("ternary", "norm", ...), shape


def tensor_specs(cfg: ModelConfig) -> list[TensorInfo]:
    """The architecture's tensors (its ArchSpec's list); refuses an architecture with none."""
    try:
        spec = get_arch(cfg.arch)
    except UnsupportedModelError as exc:
        raise UnsupportedModelError(f"no synthetic tensor list for architecture {cfg.arch!r}: {exc}") from None
    return spec.tensor_list(cfg)


class _TensorSpecsByArch(Mapping[str, Callable[[ModelConfig], list[TensorInfo]]]):
    """``TENSOR_SPECS[arch](cfg)``: a read-only view of the registry for callers that index by name."""

    def __getitem__(self, arch: str) -> Callable[[ModelConfig], list[TensorInfo]]:
        return get_arch(arch).tensor_list

    def __iter__(self) -> Iterator[str]:
        return iter(known_arch_names())

    def __len__(self) -> int:
        return len(known_arch_names())


TENSOR_SPECS = _TensorSpecsByArch()


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


def random_dense(info: TensorInfo, seed: int) -> DenseTensor:
    """A float tensor for a non-ternary role, in the range a trained model has (drawn on the CPU)."""
    g = _generator(seed, info.name)
    shape = info.shape
    if info.kind in ("norm", "gated_norm"):
        return _random_norm(info.name, shape, seed)
    if info.kind == "proj_bf16":
        return DenseTensor((torch.randn(shape, generator=g) / shape[-1] ** 0.5).to(torch.bfloat16))
    if info.kind == "conv":
        return DenseTensor(torch.randn(shape, generator=g) * (0.5 / shape[-1] ** 0.5))
    if info.kind in ("a_log", "a"):
        a_log = torch.empty(shape).uniform_(1.0, 16.0, generator=g).log()
        return DenseTensor(a_log if info.kind == "a_log" else -torch.exp(a_log))
    if info.kind == "dt_bias":
        return DenseTensor(0.5 * torch.randn(shape, generator=g))
    raise ValueError(f"unknown synthetic tensor kind {info.kind!r} for {info.name}")


def _device_generator(seed: int, name: str, device: torch.device) -> torch.Generator:
    if device.type == "cpu":
        return _generator(seed, name)
    g = torch.Generator(device=device)
    g.manual_seed(_generator(seed, name).initial_seed())
    return g


def random_ternary_t3(name: str, shape: tuple[int, int], seed: int = 0, group_size: int = DEFAULT_GROUP_SIZE,
                      device: torch.device | str = "cpu") -> TernaryTensor:
    """Random ternary weights drawn directly in the base-3 ``t3`` packing (uniform trits).

    Byte ``m`` of a group holds 5 trits (0..242); the last byte of a group holds only the
    ``group_size % 5`` remaining trits (0..3^r - 1), as :func:`runtime.formats.codecs.pack_t3` makes.
    ``device="cuda"`` draws on the GPU (seconds instead of minutes for the 27B; the values then
    come from the CUDA generator, deterministic per seed but different from the CPU draw).
    """
    rows, cols = shape
    device = torch.device(device)
    g = _device_generator(seed, name, device)
    groups = cols // group_size
    full, rem = divmod(group_size, 5)
    nbg = full + (1 if rem else 0)
    packed = torch.empty(rows, groups, nbg, dtype=torch.uint8, device=device)
    step = max(1, _CHUNK_ELEMS // (groups * nbg))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        packed[r0:r1, :, :full] = torch.randint(0, 243, (r1 - r0, groups, full), generator=g,
                                                device=device).to(torch.uint8)
        if rem:
            packed[r0:r1, :, full] = torch.randint(0, 3 ** rem, (r1 - r0, groups), generator=g,
                                                   device=device).to(torch.uint8)
    base = (1.5 / cols) ** 0.5
    scales = ((torch.rand(rows, groups, generator=g, device=device) + 0.5) * base).to(torch.float16)
    return TernaryTensor((rows, cols), group_size, packed.view(rows, groups * nbg), scales, T3)


def random_ternary_t2(name: str, shape: tuple[int, int], seed: int = 0, group_size: int = DEFAULT_GROUP_SIZE,
                      device: torch.device | str = "cpu") -> TernaryTensor:
    """Random ternary weights in the 2-bit ``t2`` packing, drawn on ``device`` (uniform codes 0..2).

    Each byte is one of the 81 bytes whose four 2-bit codes are all in {0, 1, 2} (a uniform draw of
    the byte index, looked up in a table on the device), so no code 3 is ever produced. Scales as
    :func:`random_ternary`. Deterministic per ``(seed, name, device type)``; on CUDA the values come
    from the CUDA generator (seconds for the 27B instead of minutes), so they differ from the CPU
    draw of :func:`random_ternary`.
    """
    rows, cols = shape
    if cols % group_size or group_size % 4:
        raise ValueError(f"{name}: width {cols} / group size {group_size} do not fit the t2 layout")
    device = torch.device(device)
    g = _device_generator(seed, name, device)
    table = _T2_TERNARY_BYTES.to(device)
    nb = cols // 4
    packed = torch.empty(rows, nb, dtype=torch.uint8, device=device)
    step = max(1, _CHUNK_ELEMS // nb)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        idx = torch.randint(0, 81, (r1 - r0, nb), generator=g, device=device, dtype=torch.int64)
        packed[r0:r1] = table[idx]
    base = (1.5 / cols) ** 0.5
    scales = ((torch.rand(rows, cols // group_size, generator=g, device=device) + 0.5) * base).to(torch.float16)
    return TernaryTensor((rows, cols), group_size, packed, scales, T2)


def synthetic_config(name: str) -> ModelConfig:
    """A copy of ``SYNTHETIC_CONFIGS[name]`` (callers may tweak it without touching the table)."""
    if name not in SYNTHETIC_CONFIGS:
        raise UnsupportedModelError(
            f"unknown synthetic model {name!r}; choose one of: {', '.join(SYNTHETIC_CONFIGS)}")
    return ModelConfig.from_dict(SYNTHETIC_CONFIGS[name].to_dict())


def synthetic_tensors(cfg: ModelConfig, seed: int = 0, encoding: str = T2,
                      group_size: int = DEFAULT_GROUP_SIZE, device: torch.device | str = "cpu",
                      direct_t3: bool = False) -> Iterator[tuple[str, Tensor]]:
    """Yield ``(name, tensor)`` one at a time, so a writer can stream a large model to disk.

    Ternary matrices: on the CPU in t2 (t3 = the same codes repacked) unless ``direct_t3`` draws
    base-3 codes directly (what a PTQ1 file holds; minutes faster for the 27B); off the CPU
    (``device``) they are drawn there. Other roles are drawn on the CPU and moved.
    """
    device = torch.device(device)
    if encoding not in (T2, T3):
        raise ValueError(f"unknown ternary encoding {encoding!r}")
    for info in tensor_specs(cfg):
        if info.kind == TERNARY:
            shape = (info.shape[0], info.shape[1])
            if encoding == T3 and (direct_t3 or device.type != "cpu"):
                yield info.name, random_ternary_t3(info.name, shape, seed, group_size, device)
            elif device.type != "cpu":
                yield info.name, random_ternary_t2(info.name, shape, seed, group_size, device)
            else:
                yield info.name, random_ternary(info.name, shape, seed, group_size, encoding)
        else:
            yield info.name, DenseTensor(random_dense(info, seed).data.to(device))


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

    byte_to_char = byte_level_alphabet()
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
    tensors = dict(synthetic_tensors(cfg, seed, encoding, group_size, direct_t3=True))
    return ModelData(
        config=cfg,
        tensors=tensors,
        tokenizer=synthetic_tokenizer(),
        generation_defaults={"temperature": 0.5, "top_p": 0.85, "top_k": 20},
        provenance=Provenance(source_name=f"synthetic:{name}:seed={seed}:g{group_size}", source_format="synthetic"),
        name=f"synthetic-{name}",
    )
