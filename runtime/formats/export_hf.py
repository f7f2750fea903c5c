"""Any model the engine loads -> a plain Hugging Face folder that transformers, vLLM and SGLang run.

Why: those engines already serve models across GPUs and machines; a ternary model exported as an
ordinary bf16 (or fp16) Qwen3 / Qwen3.5 / Llama checkpoint runs there with no custom code. Each
ternary matrix is dequantised exactly (``t * s`` in fp32), Bonsai 2's Hadamard rotation is folded
back (``W = W_stored R``: every stored row ``r -> R^T r``, the embedding table alike; see
:mod:`runtime.model.qwen35.hadamard`), and the GGUF conventions the readers keep (Qwen3.5's ``+1`` norms,
``ssm_a = -exp(A_log)``) are turned back into Hugging Face's. Only then is the value rounded to the
output dtype; the largest rounding error is measured and reported.

Streaming: tensors are read one at a time from the source's memory map and converted in row
chunks of :data:`CHUNK_BYTES`, each written straight into its safetensors shard (the header is
computed first from the shapes), so peak memory is about one packed tensor plus one chunk, whatever
the model size. The folder is built under a temporary name beside ``OUT`` and renamed at the end:
a failure or a cancel leaves nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from runtime.atomic import temp_path_for
from runtime.chat_template import FALLBACK_CHATML_TEMPLATE
from runtime.errors import CancelledError, ModelFormatError, UnsupportedModelError
from runtime.formats import hf_export_meta as meta
from runtime.formats.arch import NORM, get_arch
from runtime.formats.loader import ModelSource, detect_format, open_source
from runtime.formats.model_data import DenseTensor, Tensor, TernaryTensor
from runtime.generation import CancelToken
from runtime.model.config import ModelConfig

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_ST_DTYPE = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9  # transformers' long-time default "5GB"
CHUNK_BYTES = 32 << 20  # fp32 bytes converted per step

# progress(done_bytes, total_bytes, tensor_name), in output bytes
Progress = Callable[[int, int, str], None]


@dataclass
class ExportResult:
    output: Path
    architecture: str  # config.json architectures[0]
    source_format: str
    tensors: int
    shards: int
    output_bytes: int
    dtype: str
    rotation_folded: bool  # Bonsai 2 Hadamard rotation folded back into the weights
    max_rounding_error: float  # max over tensors of max|out - exact| / max|exact| (0.0: lossless)
    worst_tensor: str
    seconds: float


@dataclass
class _Item:
    """One output tensor: where it comes from and what it becomes."""

    source: str
    name: str
    shape: tuple[int, ...]
    nbytes: int
    shard: int = 0
    offset: int = 0  # within the shard's data section


class _Converter:
    """Source tensor -> exact fp32 values in Hugging Face layout, in row chunks."""

    def __init__(self, config: ModelConfig, shapes: dict[str, tuple[int, ...]]) -> None:
        self.config = config
        spec = get_arch(config.arch)
        self.kinds = {t.name: t.kind for t in spec.tensor_list(config)}
        self.rotation = None
        self.unfold: set[str] = set()
        self.out_perm: torch.Tensor | None = None
        hc = config.hadamard
        if hc is None:
            return
        if config.arch != "qwen35":
            raise UnsupportedModelError(f"a Hadamard-rotated {config.arch} model is not something this runtime runs")
        from runtime.model.qwen35.hadamard import HadamardRotation, validate_rotation
        from runtime.model.qwen35.names import v_head_permutation

        validate_rotation(hc, shapes)  # refuses metadata it cannot undo exactly
        unknown = set(hc.inverse_weight_names) - {"model.embed_tokens.weight"}
        if unknown:
            raise UnsupportedModelError(f"inverse rotation is only supported on the embedding, not {sorted(unknown)}")
        self.rotation = HadamardRotation.from_config(hc, "cpu", method="butterfly")
        self.unfold = set(hc.weight_names) | set(hc.inverse_weight_names)
        nk, nv = config.linear_num_key_heads, config.linear_num_value_heads
        if not hc.gdn_v_grouped and nk and nk != nv:
            # out_proj was folded over the tiled V-head order: its columns go back to grouped order
            self.out_perm = v_head_permutation(nk, nv, config.linear_value_head_dim, to_grouped=True)

    def out_name(self, name: str) -> str:
        return name[:-1] + "A_log" if name.endswith("linear_attn.A") else name

    def chunks(self, name: str, t: Tensor) -> Iterator[torch.Tensor]:
        """fp32 pieces of the output tensor, in row order (whole for vectors and the conv)."""
        if isinstance(t, DenseTensor) and t.data.dim() != 2:
            yield self._small(name, t.data.to(torch.float32))
            return
        rows, cols = t.shape
        step = max(1, CHUNK_BYTES // (4 * cols))
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            if isinstance(t, TernaryTensor):
                part = TernaryTensor((r1 - r0, cols), t.group_size, t.codes[r0:r1], t.scales[r0:r1], t.encoding)
                x = part.dequantize(torch.float32)  # exact: +-s or 0, s an fp16 value
            else:
                x = t.data[r0:r1].to(torch.float32)
            if name in self.unfold:
                assert self.rotation is not None
                x = self.rotation.inverse(x)
                if self.out_perm is not None and name.endswith("linear_attn.out_proj.weight"):
                    x = x.index_select(1, self.out_perm)
            yield x

    def _small(self, name: str, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        if c.arch == "qwen35":
            if self.kinds.get(name) == NORM and c.norm_weight_offset != 1.0:
                x = x + (c.norm_weight_offset - 1.0)  # GGUF stores 1 + w; transformers adds the 1 itself
            elif name.endswith("linear_attn.A"):
                if not bool((x < 0).all()):
                    raise ModelFormatError(f"{name}: ssm_a must be negative (-exp(A_log)) to give A_log")
                x = torch.log(-x)
        return x


def _plan(source: ModelSource, conv: _Converter, itemsize: int, max_shard: int) -> list[_Item]:
    c = source.config
    expected = get_arch(c.arch).expected_shapes(c)
    items, shard, used = [], 0, 0
    for name in source.tensor_names():
        out = conv.out_name(name)
        if name not in expected and out not in expected:
            raise UnsupportedModelError(
                f"tensor {name} has no place in a plain Hugging Face {meta.HF_CLASSES[c.arch][0]} checkpoint"
                + (" (llama.cpp's rope_freqs: the llama3 RoPE parameters are not in the file)"
                   if name == "rope_freqs.weight" else ""))
        shape = tuple(expected.get(name) or expected[out])
        nbytes = math.prod(shape) * itemsize
        if used and used + nbytes > max_shard:
            shard, used = shard + 1, 0
        items.append(_Item(name, out, shape, nbytes, shard, used))
        used += nbytes
    return items


def _header(items: list[_Item], dtype: str) -> bytes:
    h: dict[str, object] = {"__metadata__": {"format": "pt"}}
    for it in items:
        h[it.name] = {"dtype": dtype, "shape": list(it.shape), "data_offsets": [it.offset, it.offset + it.nbytes]}
    raw = json.dumps(h, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # data section 8-byte aligned
    return struct.pack("<Q", len(raw)) + raw


def _shard_names(n: int) -> list[str]:
    if n == 1:
        return ["model.safetensors"]
    return [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def _release_source_pages(source: ModelSource, name: str) -> None:
    """Drop a ``.ternary`` tensor's mapped pages once written (its tensors are views of the map)."""
    release_pages = getattr(source, "release_pages", None)  # only .ternary files map their tensors
    if release_pages is not None:
        release_pages(name)


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _check_output(src: Path, out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ModelFormatError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ModelFormatError(f"{out}: folder is not empty; use --force to replace it")
    s, o = src.resolve(), out.resolve()
    if s.is_relative_to(o) or (s.is_dir() and o.is_relative_to(s)):
        raise ModelFormatError(f"{out}: the output would replace or sit inside the source {src}")


def _install(tmp: Path, out: Path) -> None:
    """Rename the finished folder to ``out`` (replacing an empty or forced one)."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.{os.getpid()}.old")
        out.rename(old)
    try:
        tmp.rename(out)
    except BaseException:
        if old is not None:
            old.rename(out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    with contextlib.suppress(OSError):
        fd = os.open(out.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def export_hf(src: str | os.PathLike[str], out: str | os.PathLike[str], *, dtype: str = "bf16",
              force: bool = False, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
              progress: Progress | None = None, cancel: CancelToken | None = None) -> ExportResult:
    """Write ``src`` (.ternary, .gguf or HF folder) as a Hugging Face folder ``out``.

    ``dtype``: "bf16" (default), "fp16" (exact for unrotated ternary weights, whose values are fp16
    scales) or "fp32". Refuses a non-empty ``out`` unless ``force``. Raises
    :class:`runtime.errors.CancelledError` when ``cancel`` is set; nothing is left behind then.
    """
    t0 = time.perf_counter()
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if max_shard_bytes < 1:
        raise ValueError("max_shard_bytes must be positive")
    src_p, out_p = Path(src), Path(out)
    _check_output(src_p, out_p, force)
    torch_dtype = DTYPES[dtype]
    itemsize = torch_dtype.itemsize
    # an HF folder's floats are kept as stored: recovering ternary codes would only cost time
    source = open_source(src_p, keep_dense=detect_format(src_p) == "hf")
    tmp = temp_path_for(out_p)
    try:
        c = source.config
        if source.tokenizer is None:
            raise UnsupportedModelError(f"{src_p.name} has no tokenizer, so the export could not be used for chat")
        config_json = meta.hf_config(c, source.tokenizer, dtype)
        shapes = {n: tuple(source.tensor_spec(n).shape) for n in source.tensor_names()}
        conv = _Converter(c, shapes)
        items = _plan(source, conv, itemsize, max_shard_bytes)
        n_shards = items[-1].shard + 1 if items else 1
        names = _shard_names(n_shards)
        total = sum(it.nbytes for it in items)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        worst, worst_name, done = 0.0, "", 0
        for s in range(n_shards):
            shard_items = [it for it in items if it.shard == s]
            with open(tmp / names[s], "wb") as f:
                f.write(_header(shard_items, _ST_DTYPE[torch_dtype]))
                for it in shard_items:
                    written, err, peak = 0, 0.0, 0.0
                    for x in conv.chunks(it.source, source.load(it.source)):
                        if cancel is not None and cancel.cancelled:
                            raise CancelledError("export cancelled")
                        y = x.to(torch_dtype).contiguous()
                        if torch_dtype != torch.float32:
                            err = max(err, float((y.to(torch.float32) - x).abs().max()) if x.numel() else 0.0)
                        peak = max(peak, float(x.abs().max()) if x.numel() else 0.0)
                        f.write(memoryview(y.reshape(-1).view(torch.uint8).numpy()))
                        written += y.numel() * itemsize
                        if progress is not None:
                            progress(done + written, total, it.name)
                    if written != it.nbytes:
                        raise ModelFormatError(f"{it.source}: produced {written} bytes, expected {it.nbytes} "
                                               f"for shape {list(it.shape)}")
                    _release_source_pages(source, it.source)
                    done += written
                    rel = err / peak if peak > 0 else 0.0
                    if rel > worst:
                        worst, worst_name = rel, it.name
                f.flush()
                os.fsync(f.fileno())
        if n_shards > 1:
            index = {"metadata": {"total_size": total}, "weight_map": {it.name: names[it.shard] for it in items}}
            _write_text(tmp / "model.safetensors.index.json", json.dumps(index, indent=2) + "\n")
        _write_metadata(tmp, source, config_json)
        _install(tmp, out_p)
        return ExportResult(out_p, config_json["architectures"][0], source.source_format, len(items), n_shards,
                            total, dtype, conv.rotation is not None, worst, worst_name, time.perf_counter() - t0)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        source.close()


def _write_metadata(folder: Path, source: ModelSource, config_json: dict) -> None:
    c, tok = source.config, source.tokenizer
    assert tok is not None
    template = tok.chat_template
    if template is None:  # what the engine renders with for a file without one
        template = FALLBACK_CHATML_TEMPLATE
    fallback = get_arch(c.arch).sampling_defaults(c)  # the engine's defaults where the file has none
    docs = {
        "config.json": config_json,
        "generation_config.json": meta.generation_config(tok, source.generation_defaults, fallback),
        "tokenizer_config.json": meta.tokenizer_config(tok, template, c.max_position_embeddings),
    }
    for fn, doc in docs.items():
        _write_text(folder / fn, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    _write_text(folder / "tokenizer.json", tok.tokenizer_json)
    _write_text(folder / "chat_template.jinja", template)
