"""Text embeddings run by our own runtime: Qwen3-Embedding and any Qwen3-family model file.

Why here and not a second inference stack: an embedding model of the Qwen3 family is the same
transformer the chat engine runs, read by the same format readers (GGUF, ``.ternary``, Hugging
Face folders) and prepared by the same :class:`runtime.model.qwen3.Qwen3Model`; only the head
differs. Qwen3-Embedding's recipe (its model card and ``config_sentence_transformers.json``):

* every input ends with ``<|endoftext|>`` (the official tokenizer's post-processor appends it);
  a text longer than ``max_tokens`` is cut so that the EOS stays last, as ``truncation=True`` does;
* the vector is the final-norm hidden state of that last token, L2-normalised;
* queries are ``f"Instruct: {instruction}\\nQuery:{query}"``, documents are plain text.

Several texts go through one forward pass packed end to end (each from position 0, a
block-diagonal causal mask keeps them apart), so short texts do not pay a pass each and no
padding is computed. Not thread-safe: one owner thread, like the engine.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runtime.errors import CancelledError, InvalidSettingError, TernaryError, UnsupportedModelError
from runtime.formats.model_data import DenseTensor, ModelData, Tensor
from runtime.generation import CancelToken
from runtime.model.qwen3 import Qwen3Model
from runtime.tokenizer import Tokenizer

DEFAULT_QUERY_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
EOS_TOKEN = "<|endoftext|>"  # what Qwen3-Embedding's tokenizer appends to every input
MAX_TOKENS_LIMIT = 32768  # Qwen3-Embedding's context; a larger request is a mistake, not a wish
# Tokens per packed forward pass. The mask makes attention cost T^2 for the whole pack, wasted
# between texts: at 512 that is ~3% of a 0.6B model's matmuls, and packing 16 short queries into
# one pass was 5.8x faster than one pass each; 250-token passages ran at 167 tok/s packed vs 173
# one at a time (2 cores, random weights of Qwen3-Embedding-0.6B's shapes), 2048 lost 28%.
PACK_TOKENS = 512
_GGUF_POOLING_NAMES = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}  # llama.cpp <arch>.pooling_type


class EmbeddingModelError(UnsupportedModelError):
    """A file that cannot serve as an embedding model. ``code``: ``"not-embedding"`` (another
    architecture, e.g. the Qwen3.5 hybrid), ``"pooling"`` (the file declares a pooling other than
    last-token), ``"no-tokenizer"``, ``"no-eos"`` (no ``<|endoftext|>`` token) or ``"closed"``."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def format_query(text: str, instruction: str = DEFAULT_QUERY_INSTRUCTION) -> str:
    """Qwen3-Embedding's query format (no space after ``Query:``); an empty instruction = plain text."""
    return f"Instruct: {instruction}\nQuery:{text}" if instruction else text


class EmbeddingModel:
    """A Qwen3-family embedding model run by our own engine: last-token pooling, L2-normalised."""

    def __init__(self, model: Qwen3Model, tokenizer: Tokenizer, eos_id: int, *, model_id: str, max_tokens: int,
                 device: torch.device, name: str) -> None:
        self.model: Qwen3Model | None = model
        self.tokenizer = tokenizer
        self.eos_id = eos_id
        self.model_id = model_id
        self.dim = model.config.hidden_size
        self.max_tokens = max_tokens
        self.device = device
        self.name = name
        self.pack_tokens = PACK_TOKENS  # a longer text runs alone

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, path: str | os.PathLike[str], device: str = "auto", *, max_tokens: int = 512,
             progress: Callable[[str, float], None] | None = None, cancel: CancelToken | None = None,
             dtype: torch.dtype | None = None, model_id: str | None = None) -> EmbeddingModel:
        """Read a model file (GGUF, ``.ternary`` or Hugging Face folder) and prepare it on ``device``.

        Weights stored as floats stay dense (Qwen3-Embedding is not ternary); ternary files keep
        their ternary kernels. ``max_tokens`` counts the appended EOS and is capped at the model's
        own context. ``dtype``: activations, fp32 on the CPU and bf16 on CUDA by default (the
        model's defaults). ``model_id`` defaults to the file name plus its size in bytes, so a
        different file under the same name gets new vectors. ``progress(stage, fraction)``.
        """
        from runtime.devices import resolve_device
        from runtime.formats.loader import open_source

        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 2 <= max_tokens <= MAX_TOKENS_LIMIT:
            raise InvalidSettingError(f"max_tokens must be an integer from 2 to {MAX_TOKENS_LIMIT}, "
                                      f"got {max_tokens!r}", "max_tokens")
        dev = resolve_device(device)
        p = Path(path)

        def report(stage: str, fraction: float) -> None:
            if cancel is not None and cancel.cancelled:
                raise CancelledError("loading the embedding model was cancelled")
            if progress is not None:
                progress(stage, fraction)

        if dtype is None:
            dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
        report("reading model file", 0.0)
        src = open_source(p, keep_dense=True)
        try:
            _check_source(src, p)
            names = src.tensor_names()
            tensors: dict[str, Tensor] = {}
            for i, n in enumerate(names):
                t = src.load(n)
                if dev.type == "cpu" and isinstance(t, DenseTensor) and t.data.is_floating_point():
                    # the model would copy it into the activation dtype anyway: converting here, one
                    # tensor at a time, keeps a single copy of the weights in RAM (not F16 + fp32)
                    t = DenseTensor(t.data.to(dtype))
                tensors[n] = t
                report("reading model file", 0.5 * (i + 1) / len(names))
            data = ModelData(config=src.config, tensors=tensors, tokenizer=src.tokenizer, name=src.model_name)
        finally:
            src.close()
        assert data.tokenizer is not None  # _check_source refused a file without one
        tokenizer = Tokenizer(data.tokenizer, p.name)
        eos_id = _appended_token_id(tokenizer, data.tokenizer.tokenizer_json, p.name)
        max_tokens = min(max_tokens, data.config.max_position_embeddings)

        def model_progress(stage: str, fraction: float) -> None:
            report(stage, 0.5 + 0.5 * fraction)

        model = Qwen3Model.from_model_data(data, dev, dtype=dtype, max_positions=max_tokens, embedding_only=True,
                                           progress=model_progress, cancel=cancel)
        del data, tensors
        gc.collect()
        report("ready", 1.0)
        return cls(model, tokenizer, eos_id, model_id=model_id or _default_model_id(p), max_tokens=max_tokens,
                   device=dev, name=src.model_name or p.stem)

    # ------------------------------------------------------------------ embedding

    def token_ids(self, text: str) -> list[int]:
        """The ids a text is embedded from: its tokens, cut to ``max_tokens - 1``, then the EOS."""
        return self.tokenizer.encode(text)[: self.max_tokens - 1] + [self.eos_id]

    def count_tokens(self, text: str) -> int:
        """Tokens the text is embedded from (at most ``max_tokens``)."""
        return len(self.token_ids(text))

    def embed_documents(self, texts: list[str], *, cancel: CancelToken | None = None,
                        progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """``[len(texts), dim]`` float32 unit rows. ``progress(done, total)`` after each packed
        pass; ``cancel`` is checked before each pass (raises :class:`CancelledError`)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("embed_documents takes a list of strings")
        return self._embed([self.token_ids(t) for t in texts], cancel, progress)

    def embed_query(self, text: str, instruction: str = DEFAULT_QUERY_INSTRUCTION) -> np.ndarray:
        """``[dim]`` float32 unit vector of ``text`` as a search query (with the instruction)."""
        if not isinstance(text, str):
            raise TypeError("embed_query takes a string")
        return self._embed([self.token_ids(format_query(text, instruction))], None, None)[0]

    def _embed(self, seqs: list[list[int]], cancel: CancelToken | None,
               progress: Callable[[int, int], None] | None) -> np.ndarray:
        model = self._model()
        out = np.empty((len(seqs), self.dim), dtype=np.float32)
        i = 0
        while i < len(seqs):
            if cancel is not None and cancel.cancelled:
                raise CancelledError("embedding was cancelled")
            j, total = i + 1, len(seqs[i])
            while j < len(seqs) and total + len(seqs[j]) <= self.pack_tokens:
                total += len(seqs[j])
                j += 1
            out[i:j] = self._forward_pack(model, seqs[i:j])
            i = j
            if progress is not None:
                progress(i, len(seqs))
        return out

    def _forward_pack(self, model: Qwen3Model, seqs: list[list[int]]) -> np.ndarray:
        dev = self.device
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        tokens = torch.tensor([t for s in seqs for t in s], dtype=torch.long, device=dev)
        pos = torch.cat([torch.arange(n, dtype=torch.long) for n in lengths.tolist()]).to(dev)
        seg = torch.repeat_interleave(torch.arange(len(seqs)), lengths).to(dev)
        mask = (seg[:, None] == seg[None, :]) & (pos[None, :] <= pos[:, None])
        last = (torch.cumsum(lengths, 0) - 1).to(dev)
        with torch.inference_mode():
            h = model.hidden_states(tokens, pos, mask).index_select(0, last).to(torch.float32)
            h = torch.nn.functional.normalize(h, p=2.0, dim=-1)
        return h.cpu().numpy()

    def _model(self) -> Qwen3Model:
        if self.model is None:
            raise EmbeddingModelError("the embedding model was closed", "closed")
        return self.model

    def close(self) -> None:
        """Release the weights (the object is unusable afterwards)."""
        self.model = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def __enter__(self) -> EmbeddingModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- helpers


def is_embedding_file(path: str | os.PathLike[str]) -> bool:
    """Whether a model file declares itself an embedding model (GGUF ``<arch>.pooling_type``, a
    sentence-transformers ``1_Pooling`` folder): such a file must not be offered or loaded as a
    chat model. Reads only the GGUF header; False for anything unreadable (the loader says why)."""
    from runtime.formats.gguf import GGUFFile

    p = Path(path)
    try:
        if p.is_dir():
            return (p / "1_Pooling" / "config.json").is_file()
        if not p.is_file():  # a FIFO or device would block the read below; the loader says what it is
            return False
        with open(p, "rb") as f:
            if f.read(4) != b"GGUF":
                return False
        with GGUFFile(p) as g:
            return f"{g.metadata.get('general.architecture')}.pooling_type" in g.metadata
    except (OSError, TernaryError):
        return False


def _check_source(src: Any, path: Path) -> None:
    """Refuse, before reading any weight, what cannot give Qwen3-style last-token embeddings."""
    arch = src.config.arch
    if arch != "qwen3":
        what = "the Qwen3.5 hybrid (a chat model)" if arch == "qwen35" else f"architecture {arch!r}"
        raise EmbeddingModelError(f"{path.name} is {what}, not an embedding model: document search needs a "
                                  "Qwen3-family embedding model such as Qwen3-Embedding-0.6B", "not-embedding")
    if src.tokenizer is None:
        raise EmbeddingModelError(f"{path.name} has no tokenizer, so it cannot embed text (a Hugging Face folder "
                                  "needs its tokenizer.json)", "no-tokenizer")
    pooling = _declared_pooling(src, path)
    if pooling is not None and pooling != "last":
        raise EmbeddingModelError(f"{path.name} declares {pooling} pooling; this runtime computes last-token "
                                  "embeddings (Qwen3-Embedding) only", "pooling")


def _declared_pooling(src: Any, path: Path) -> str | None:
    """The pooling the file declares: GGUF ``<arch>.pooling_type`` (llama.cpp's enum) or a
    sentence-transformers ``1_Pooling/config.json`` beside a Hugging Face folder; None if silent."""
    meta = getattr(getattr(src, "file", None), "metadata", None)
    if isinstance(meta, dict):
        value = meta.get(f"{meta.get('general.architecture')}.pooling_type")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            return f"an unreadable ({value!r})"
        return _GGUF_POOLING_NAMES.get(int(value), f"an unknown ({int(value)})")
    pooling_cfg = path / "1_Pooling" / "config.json" if path.is_dir() else None
    if pooling_cfg is None or not pooling_cfg.is_file() or pooling_cfg.stat().st_size > 1 << 16:
        return None
    try:
        doc = json.loads(pooling_cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return "an unreadable"
    if not isinstance(doc, dict):
        return "an unreadable"
    modes = [k.removeprefix("pooling_mode_").removesuffix("_tokens") for k, v in doc.items()
             if k.startswith("pooling_mode_") and v is True]
    if modes == ["lasttoken"]:
        return "last"
    return "+".join(modes) or "no"


def _appended_token_id(tokenizer: Tokenizer, tokenizer_json: str, source: str) -> int:
    """The token every input ends with: the one the tokenizer's own post-processor appends (a
    Hugging Face ``TemplateProcessing`` ending in a special token), else ``<|endoftext|>``."""
    try:
        doc = json.loads(tokenizer_json)
    except ValueError:
        doc = None
    post = doc.get("post_processor") if isinstance(doc, dict) else None
    steps = post.get("processors", []) if isinstance(post, dict) and post.get("type") == "Sequence" else [post]
    for step in steps:
        if isinstance(step, dict) and step.get("type") == "TemplateProcessing" and step.get("single"):
            last = step["single"][-1]
            name = last.get("SpecialToken", {}).get("id") if isinstance(last, dict) else None
            tid = tokenizer.token_to_id(name) if isinstance(name, str) else None
            if tid is not None:
                return tid
    tid = tokenizer.token_to_id(EOS_TOKEN)
    if tid is None:
        raise EmbeddingModelError(f"{source}: the tokenizer has no {EOS_TOKEN} token, which Qwen3 embedding "
                                  "models pool on", "no-eos")
    return tid


def _default_model_id(path: Path) -> str:
    """``<file or folder name>:<bytes>``: stored with the vectors, so another file re-embeds."""
    if path.is_dir():
        size = sum(f.stat().st_size for f in path.glob("*.safetensors") if f.is_file())
    else:
        size = path.stat().st_size
    return f"{path.name}:{size}"

