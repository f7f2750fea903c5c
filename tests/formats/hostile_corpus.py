"""A corpus of hostile model inputs built from the tiny test models (issue 26, items 13, 14, 15, 21).

Each :class:`Case` is one broken (or, for controls, intact) model input: a ``.ternary`` file, a
GGUF file or a Hugging Face folder whose header, config, generation config, tokenizer or file
type was changed in one way. ``refuse`` names the operations (``inspect``, ``verify``,
``convert``, ``generate``) that must refuse it with the runtime's own error, and ``msg`` is a
regular expression the refusal must match (it names the file's field); ``mention`` names
operations that may succeed but must still say it (``verify`` checks a GGUF's bytes and
container and only *notes* that its model will not load). Every other operation
may work or refuse, but never raise another exception type, hang or allocate past the cap; the
runner (:mod:`tests.formats.hostile_runner`) enforces that.

Classes: ``sizes`` (counts from headers: 0, 10**7, 2**32-1 layers ...), ``special_files`` (FIFOs,
devices, link loops, folders where files belong), ``types`` (wrong types and impossible values in
every header and config, deep JSON nesting) and ``integrity`` (checksum failures, a relabelled
dtype, invalid tokenizers).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ALL_OPS = ("inspect", "verify", "convert", "generate")
LOAD_OPS = ALL_OPS  # every op opens the model
NOT_VERIFY = ("inspect", "convert", "generate")


@dataclass
class Case:
    cls: str
    name: str
    path: str
    refuse: list[str] = field(default_factory=list)
    msg: str = ""
    mention: list[str] = field(default_factory=list)  # ops whose output must match msg, ok or refused

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


INF = "__INF__"
NEG_INF = "__NEGINF__"
# one value of each hostile kind; the placeholders become 1e400 / -1e400 in the written JSON
BAD_VALUES: list[tuple[str, Any]] = [
    ("text", "abc"), ("number-as-text", "2"), ("nan", math.nan), ("1e400", INF), ("-1e400", NEG_INF),
    ("zero", 0), ("negative", -1), ("bool", True), ("list", [1, 2]), ("object", {"a": 1}), ("huge", 10**30),
    ("half", 2.5),
]


def dump_json(doc: Any) -> str:
    """JSON with NaN kept and the 1e400 placeholders written as literal overflowing numbers."""
    text = json.dumps(doc, ensure_ascii=False)
    return text.replace(f'"{INF}"', "1e400").replace(f'"{NEG_INF}"', "-1e400")


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _set_path(doc: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        doc = doc.setdefault(k, {})
    doc[keys[-1]] = value


# ------------------------------------------------------------------------------------------------
# .ternary

def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def rewrite_ternary(src: Path, dst: Path, mutate: Callable[[dict[str, Any]], Any], *, raw_header: bool = False) -> Path:
    """Copy a .ternary with its header changed by ``mutate`` (data moved so offsets stay valid).

    ``mutate`` edits the header dict in place, or (``raw_header``) returns the header text to write.
    """
    from runtime.formats.ternary_file import ALIGNMENT, PREAMBLE

    raw = src.read_bytes()
    magic, version, hlen = PREAMBLE.unpack_from(raw)
    header = json.loads(raw[PREAMBLE.size:PREAMBLE.size + hlen])
    old_start = min(e["offset"] for e in header["tensors"])
    data = raw[old_start:]
    if raw_header:
        text = mutate(header).encode("utf-8")
        start = _align(PREAMBLE.size + len(text), ALIGNMENT)
        dst.write_bytes(PREAMBLE.pack(magic, version, len(text)) + text + b"\0" * (start - PREAMBLE.size - len(text))
                        + data)
        return dst
    mutate(header)
    start = old_start
    for _ in range(8):
        delta = start - old_start
        h = json.loads(json.dumps(header))
        for e in h["tensors"]:
            e["offset"] += delta
        h["file_size"] = header["file_size"] + delta
        text = dump_json(h).encode("utf-8")
        need = _align(PREAMBLE.size + len(text), ALIGNMENT)
        if need <= start:
            break
        start = need
    dst.write_bytes(PREAMBLE.pack(magic, version, len(text)) + text + b"\0" * (start - PREAMBLE.size - len(text)) + data)
    return dst


def flip_tensor_byte(src: Path, dst: Path, tensor: str, at: float = 0.5) -> Path:
    from runtime.formats.ternary_file import TernaryFile

    with TernaryFile(src) as tf:
        e = tf.entries[tensor]
        off = e["offset"] + int(e["nbytes"] * at)
    raw = bytearray(src.read_bytes())
    raw[off] ^= 0x5A
    dst.write_bytes(bytes(raw))
    return dst


# ------------------------------------------------------------------------------------------------
# safetensors / HF folders

def read_safetensors(path: Path) -> tuple[dict[str, Any], bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path: Path, header: dict[str, Any], data: bytes, header_text: str | None = None) -> None:
    text = (header_text if header_text is not None else json.dumps(header)).encode("utf-8")
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def f16_relabelled_bf16(src: Path, dst: Path, only: str | None = None) -> None:
    """Re-encode F32 tensors as F16 bytes but label them BF16 (``only``: just that tensor)."""
    header, data = read_safetensors(src)
    out, blobs, off = {}, [], 0
    for name, e in header.items():
        if name == "__metadata__":
            out[name] = e
            continue
        b, en = e["data_offsets"]
        blob, dtype = data[b:en], e["dtype"]
        if dtype == "F32" and (only is None or name == only):
            blob, dtype = np.frombuffer(blob, dtype=np.float32).astype(np.float16).tobytes(), "BF16"
        out[name] = {"dtype": dtype, "shape": e["shape"], "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    write_safetensors(dst, out, b"".join(blobs))


def copy_folder(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_json_file(path: Path, mutate: Callable[[Any], Any]) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    res = mutate(doc)
    path.write_text(res if isinstance(res, str) else dump_json(doc), encoding="utf-8")


# ------------------------------------------------------------------------------------------------
# GGUF

def gguf_relabel(src: Path, dst: Path, from_type: int, to_type: int) -> int:
    """Change the GGML type id of every tensor stored as ``from_type`` (returns how many)."""
    from runtime.formats.gguf import GGUFFile

    with GGUFFile(src) as g:
        names = [(n, len(i.shape)) for n, i in g.tensors.items()]
    raw = bytearray(src.read_bytes())
    count = 0
    for name, ndims in names:
        key = struct.pack("<Q", len(name.encode())) + name.encode()
        idx = raw.rfind(key)
        pos = idx + len(key) + 4 + 8 * ndims
        (t,) = struct.unpack_from("<I", raw, pos)
        if t == from_type:
            struct.pack_into("<I", raw, pos, to_type)
            count += 1
    dst.write_bytes(bytes(raw))
    return count


# ------------------------------------------------------------------------------------------------
# the corpus

class CorpusBuilder:
    """Writes every case under ``root``; ``cases`` lists them."""

    def __init__(self, root: Path, model_data: Any, hf_folder: Path, hybrid_data: Any) -> None:
        from runtime.formats.gguf_writer import write_gguf
        from runtime.formats.ternary_file import write_model

        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.cases: list[Case] = []
        self.model_data = model_data
        self.base_ternary = write_model(model_data, root / "base.ternary")
        self.base_gguf = write_gguf(model_data, root / "base.gguf", "Q2_0_LEGACY")
        self.base_hf = hf_folder
        self.hyb_ternary = write_model(hybrid_data, root / "hyb.ternary")
        self.hyb_gguf = write_gguf(hybrid_data, root / "hyb.gguf", "Q2_0")
        self.hybrid_data = hybrid_data
        self._n = 0

    def _path(self, suffix: str) -> Path:
        self._n += 1
        return self.root / f"c{self._n:04d}{suffix}"

    def add(self, cls: str, name: str, path: Path, refuse: tuple[str, ...] | list[str] = LOAD_OPS,
            msg: str = "", mention: tuple[str, ...] = ()) -> None:
        self.cases.append(Case(cls, name, str(path), list(refuse), msg, list(mention)))

    # ---- controls ---------------------------------------------------------------------------
    def controls(self) -> None:
        for p in (self.base_ternary, self.base_gguf, self.base_hf, self.hyb_ternary, self.hyb_gguf):
            self.add("control", f"intact {Path(p).name}", Path(p), refuse=())

    # ---- item 13: sizes from headers ----------------------------------------------------------
    def sizes(self) -> None:
        from runtime.formats.gguf_writer import write_gguf

        for field_, values in {
            "num_layers": [0, -1, 1, 3, 10**7, 2**31, 2**63, 10**30],
            "hidden_size": [0, 10**9], "intermediate_size": [10**9], "num_heads": [0, 10**7],
            "num_kv_heads": [0, 3], "head_dim": [0, 10**6], "vocab_size": [0, 10**9],
            "max_position_embeddings": [0, 10**12],
        }.items():
            for v in values:
                dst = rewrite_ternary(self.base_ternary, self._path(".ternary"),
                                      lambda h, f=field_, v=v: h["config"].__setitem__(f, v))
                self.add("sizes", f".ternary config.{field_}={v}", dst, msg=f"config.{field_}")
        dst = rewrite_ternary(self.base_ternary, self._path(".ternary"),
                              lambda h: h["config"].__setitem__("layer_types", ["full_attention"] * 100_000))
        self.add("sizes", ".ternary config.layer_types with 100000 entries", dst, msg="layer_types")
        for field_, v in (("num_layers", 10**7), ("num_layers", 0), ("num_layers", 5),
                          ("linear_num_value_heads", 0), ("linear_num_key_heads", 10**6)):
            dst = rewrite_ternary(self.hyb_ternary, self._path(".ternary"),
                                  lambda h, f=field_, v=v: h["config"].__setitem__(f, v))
            self.add("sizes", f"hybrid .ternary config.{field_}={v}", dst, msg=f"config.{field_}|layer_types")
        gguf_sizes = [("block_count", "u32", 0), ("block_count", "u32", 2**32 - 1), ("block_count", "u32", 10**7),
                      ("block_count", "u32", 1), ("block_count", "u32", 3), ("block_count", "u64", 2**64 - 1),
                      ("embedding_length", "u32", 0), ("embedding_length", "u32", 2**32 - 1),
                      ("feed_forward_length", "u32", 2**32 - 1), ("attention.head_count", "u32", 0),
                      ("attention.head_count", "u32", 2**31), ("attention.head_count_kv", "u32", 0),
                      ("context_length", "u32", 0), ("context_length", "u64", 2**63),
                      ("attention.key_length", "u32", 0), ("attention.key_length", "u32", 10**6)]
        for key, vt, v in gguf_sizes:
            dst = self._path(".gguf")
            write_gguf(self.model_data, dst, "Q2_0_LEGACY", extra_metadata={f"qwen3.{key}": (vt, v)})
            self.add("sizes", f"GGUF qwen3.{key}={v}", dst, NOT_VERIFY, msg=f"qwen3.{key}", mention=("verify",))
        for key, vt, v in [("block_count", "u32", 2**32 - 1), ("block_count", "u32", 0), ("block_count", "u32", 9),
                           ("nextn_predict_layers", "u32", 2**32 - 1), ("ssm.time_step_rank", "u32", 0),
                           ("ssm.inner_size", "u32", 7), ("attention.key_length", "u32", 0),
                           ("full_attention_interval", "u32", 2**32 - 1)]:
            dst = self._path(".gguf")
            write_gguf(self.hybrid_data, dst, "Q2_0", extra_metadata={f"qwen35.{key}": (vt, v)})
            self.add("sizes", f"hybrid GGUF qwen35.{key}={v}", dst, NOT_VERIFY, msg=f"qwen35.{key}", mention=("verify",))
        for key, v in (("num_hidden_layers", 0), ("num_hidden_layers", 10**7), ("num_hidden_layers", 2**63),
                       ("num_hidden_layers", 1), ("num_hidden_layers", 3), ("num_hidden_layers", -1),
                       ("hidden_size", 10**9), ("num_attention_heads", 0), ("head_dim", 10**6),
                       ("max_position_embeddings", 0), ("intermediate_size", 10**12)):
            dst = copy_folder(self.base_hf, self._path(".hf"))
            edit_json_file(dst / "config.json", lambda d, k=key, v=v: d.__setitem__(k, v))
            self.add("sizes", f"HF config.json {key}={v}", dst, msg=key + "|layers")

    # ---- item 14: special files ---------------------------------------------------------------
    def special_files(self) -> None:
        for suffix in (".ternary", ".gguf", ""):
            p = self._path(suffix + ".fifo" if not suffix else suffix)
            os.mkfifo(p)
            self.add("special_files", f"FIFO as model file ({suffix or 'no suffix'})", p, msg="named pipe")
        p = self._path(".ternary")
        os.symlink("/dev/zero", p)
        self.add("special_files", "symlink to /dev/zero as model file", p, msg="character device")
        a, b = self._path(".ternary"), self._path(".ternary")
        os.symlink(b, a)
        os.symlink(a, b)
        self.add("special_files", "symlink loop", a, msg="loop of symbolic links")
        p = self._path(".ternary")
        os.symlink(self.root / "does-not-exist.ternary", p)
        self.add("special_files", "dangling symlink", p, msg="target does not exist")
        p = self._path(".ternary")
        p.mkdir()
        self.add("special_files", "folder named like a model file", p, msg="folder without config.json")
        for fn, msg in (("model.safetensors", "named pipe"), ("tokenizer.json", "named pipe"),
                        ("config.json", "named pipe"), ("generation_config.json", "named pipe"),
                        ("tokenizer_config.json", "named pipe"), ("chat_template.jinja", "named pipe")):
            dst = copy_folder(self.base_hf, self._path(".hf"))
            (dst / fn).unlink()
            os.mkfifo(dst / fn)
            self.add("special_files", f"HF folder with {fn} a FIFO", dst, msg=msg)
        dst = copy_folder(self.base_hf, self._path(".hf"))
        (dst / "config.json").unlink()
        (dst / "config.json").mkdir()
        self.add("special_files", "HF folder with config.json a folder", dst, msg="folder|config.json")
        dst = copy_folder(self.base_hf, self._path(".hf"))
        (dst / "tokenizer.json").unlink()
        (dst / "tokenizer.json").mkdir()
        self.add("special_files", "HF folder with tokenizer.json a folder", dst, msg="tokenizer.json")
        dst = copy_folder(self.base_hf, self._path(".hf"))
        os.mkfifo(dst / "extra.safetensors")
        self.add("special_files", "HF folder with an extra FIFO shard", dst, msg="named pipe")
        dst = copy_folder(self.base_hf, self._path(".hf"))
        (dst / "model.safetensors").rename(dst / "real.safetensors")
        os.mkfifo(dst / "model-00002.safetensors")
        (dst / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
            "model.norm.weight": "model-00002.safetensors", "lm_head.weight": "real.safetensors"}}))
        self.add("special_files", "index listing a FIFO shard", dst, msg="named pipe")

    # ---- item 15: types and values ------------------------------------------------------------
    def types(self) -> None:
        hf_fields = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings",
                     "rope_parameters.rope_theta", "rope_parameters.factor", "tie_word_embeddings", "model_type"]
        ok_values = {("rope_parameters.rope_theta", "half"), ("rope_parameters.factor", "half"),
                     ("tie_word_embeddings", "bool")}
        for f in hf_fields:
            for label, v in BAD_VALUES:
                dst = copy_folder(self.base_hf, self._path(".hf"))
                edit_json_file(dst / "config.json", lambda d, f=f, v=v: _set_path(d, f, v))
                refuse = () if (f, label) in ok_values else LOAD_OPS
                mention: tuple[str, ...] = ()
                if f == "model_type" and label in ("text", "number-as-text"):  # a name this runtime lacks
                    refuse, mention = NOT_VERIFY, ("verify",)
                field_name = f.split(".")[-1] if f != "model_type" else "model_type"
                self.add("types", f"HF config.json {f} = {label}", dst, refuse, msg=field_name, mention=mention)
        t_fields = ["num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "rms_norm_eps", "rope_theta",
                    "max_position_embeddings", "vocab_size", "tie_word_embeddings", "arch", "rope_scaling.factor"]
        ok_t = {("rope_theta", "half"), ("rope_scaling.factor", "half")}
        for f in t_fields:
            for label, v in BAD_VALUES:
                dst = rewrite_ternary(self.base_ternary, self._path(".ternary"),
                                      lambda h, f=f, v=v: _set_path(h["config"], f, v))
                refuse = () if (f, label) in ok_t else LOAD_OPS
                mention = ()
                if f == "arch" and label in ("text", "number-as-text"):  # an architecture this runtime lacks
                    refuse, mention = NOT_VERIFY, ("verify",)
                msg = f"config.{f}" if f != "arch" else "config.arch|architecture"
                self.add("types", f".ternary config.{f} = {label}", dst, refuse, msg=msg, mention=mention)
        gguf_values = [("text", "str", "abc"), ("nan", "f32", math.nan), ("inf", "f32", math.inf),
                       ("negative", "f64", -1.0), ("negative-int", "i32", -1), ("u64 max", "u64", 2**64 - 1),
                       ("bool", "bool", True), ("array", "arr_i32", [1, 2]), ("zero", "f32", 0.0)]
        for key in ("qwen3.embedding_length", "qwen3.feed_forward_length", "qwen3.attention.head_count",
                    "qwen3.attention.head_count_kv", "qwen3.attention.key_length",
                    "qwen3.attention.layer_norm_rms_epsilon", "qwen3.rope.freq_base", "qwen3.context_length",
                    "general.architecture", "tokenizer.ggml.eos_token_id", "general.sampling.temp",
                    "general.sampling.top_k", "general.name", "tokenizer.ggml.add_bos_token"):
            for label, vt, v in gguf_values:
                dst = self._path(".gguf")
                from runtime.formats.gguf_writer import write_gguf

                write_gguf(self.model_data, dst, "Q2_0_LEGACY", extra_metadata={key: (vt, v)})
                valid = {("general.sampling.temp", "zero"), ("general.name", "text"),
                         ("tokenizer.ggml.add_bos_token", "bool"), ("tokenizer.ggml.eos_token_id", "zero"),
                         ("general.sampling.top_k", "zero")}  # an integral f32 where an int belongs is read
                refuse, mention = (((), ()) if (key, label) in valid else (NOT_VERIFY, ("verify",)))
                self.add("types", f"GGUF {key} = {label}", dst, refuse, msg=key.split(".", 1)[-1] + "|architecture",
                         mention=mention)
        gen_cases = [("temperature", math.nan), ("temperature", "hot"), ("temperature", -1), ("temperature", INF),
                     ("temperature", 3.0), ("top_p", 5), ("top_p", 0), ("top_p", math.nan), ("top_k", -3),
                     ("top_k", 2.5), ("top_k", "x"), ("eos_token_id", 10**6), ("eos_token_id", -1),
                     ("eos_token_id", "x"), ("eos_token_id", [1, 99999]), ("eos_token_id", 2.5),
                     ("pad_token_id", 10**6), ("do_sample", "yes"), ("max_new_tokens", 0),
                     ("repetition_penalty", 0), ("min_p", INF)]
        for key, v in gen_cases:
            dst = copy_folder(self.base_hf, self._path(".hf"))
            edit_json_file(dst / "generation_config.json", lambda d, k=key, v=v: d.__setitem__(k, v))
            self.add("types", f"HF generation_config.json {key} = {v!r}", dst, msg=f"generation_config.json: {key}")
        for key, v in gen_cases:
            if key in ("eos_token_id", "pad_token_id"):
                continue
            dst = rewrite_ternary(self.base_ternary, self._path(".ternary"),
                                  lambda h, k=key, v=v: h.setdefault("generation_defaults", {}).__setitem__(k, v))
            self.add("types", f".ternary generation_defaults.{key} = {v!r}", dst, msg=f"generation_defaults.{key}")
        for key, v in (("eos_token_ids", ["x"]), ("eos_token_ids", [10**6]), ("eos_token_ids", 5),
                       ("bos_token_id", -5), ("pad_token_id", "x"), ("tokenizer_json", 5), ("add_bos_token", "yes")):
            dst = rewrite_ternary(self.base_ternary, self._path(".ternary"),
                                  lambda h, k=key, v=v: h["tokenizer"].__setitem__(k, v))
            self.add("types", f".ternary tokenizer.{key} = {v!r}", dst, msg=f"tokenizer.{key}")
        for key, v in (("name", 5), ("provenance", "x"), ("provenance", {"source_name": [1]}), ("chat_template", 5),
                       ("generation_defaults", [1])):
            dst = rewrite_ternary(self.base_ternary, self._path(".ternary"), lambda h, k=key, v=v: h.__setitem__(k, v))
            self.add("types", f".ternary header {key} = {v!r}", dst, msg=key)
        for key, v in (("eos_token", 5), ("add_bos_token", "yes"), ("bos_token", {"content": 7})):
            dst = copy_folder(self.base_hf, self._path(".hf"))
            edit_json_file(dst / "tokenizer_config.json", lambda d, k=key, v=v: d.__setitem__(k, v))
            refuse = LOAD_OPS if key == "add_bos_token" else ()
            self.add("types", f"HF tokenizer_config.json {key} = {v!r}", dst, refuse, msg=key)
        # deep nesting
        for depth in (200, 100_000):
            for fn in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
                dst = copy_folder(self.base_hf, self._path(".hf"))
                edit_json_file(dst / fn, lambda d, depth=depth: dump_json(d)[:-1] + f', "deep": {deep_json(depth)}}}')
                self.add("types", f"HF {fn} nested {depth} deep", dst, msg="nested too deeply")
            dst = copy_folder(self.base_hf, self._path(".hf"))
            header, data = read_safetensors(dst / "model.safetensors")
            text = json.dumps(header)[:-1] + f', "__metadata__": {{"x": {deep_json(depth)}}}}}'
            write_safetensors(dst / "model.safetensors", header, data, header_text=text)
            self.add("types", f"HF safetensors header nested {depth} deep", dst, msg="nested too deeply")
            dst = rewrite_ternary(self.base_ternary, self._path(".ternary"),
                                  lambda h, depth=depth: dump_json(h)[:-1] + f', "deep": {deep_json(depth)}}}',
                                  raw_header=True)
            self.add("types", f".ternary header nested {depth} deep", dst, msg="nested too deeply")
        # safetensors entries with wrong types
        for label, mutate in (("shape as text", lambda e: e.__setitem__("shape", "abc")),
                              ("shape 1e400", lambda e: e.__setitem__("shape", [INF])),
                              ("shape 2.5", lambda e: e.__setitem__("shape", [2.5])),
                              ("dtype a list", lambda e: e.__setitem__("dtype", ["F32"])),
                              ("offsets as text", lambda e: e.__setitem__("data_offsets", ["0", "4"])),
                              ("entry a number", None)):
            dst = copy_folder(self.base_hf, self._path(".hf"))
            header, data = read_safetensors(dst / "model.safetensors")
            if mutate is None:
                header["model.norm.weight"] = 5
            else:
                mutate(header["model.norm.weight"])
            write_safetensors(dst / "model.safetensors", header, data, header_text=dump_json(header))
            self.add("types", f"HF safetensors model.norm.weight {label}", dst, msg="model.norm.weight")

    # ---- item 21: integrity -------------------------------------------------------------------
    def integrity(self) -> None:
        from runtime.formats.ternary_file import TernaryFile

        with TernaryFile(self.base_ternary) as tf:
            names = list(tf.entries)
        for tensor in (names[0], names[len(names) // 2], names[-1]):
            for at in (0.0, 0.99):
                dst = flip_tensor_byte(self.base_ternary, self._path(".ternary"), tensor, at)
                self.add("integrity", f".ternary byte flipped in {tensor} at {at:.0%}", dst,
                         refuse=("verify", "convert"), msg="checksum")
        dst = rewrite_ternary(self.base_ternary, self._path(".ternary"),
                              lambda h: h["tensors"][1].__setitem__("checksum", "crc32:00000000"))
        self.add("integrity", ".ternary header checksum replaced", dst, refuse=("verify", "convert"), msg="checksum")
        dst = copy_folder(self.base_hf, self._path(".hf"))
        f16_relabelled_bf16(self.base_hf / "model.safetensors", dst / "model.safetensors")
        self.add("integrity", "HF safetensors: F16 data labelled BF16 (all tensors)", dst,
                 refuse=("verify", "convert", "generate"), msg="labelled BF16")
        dst = copy_folder(self.base_hf, self._path(".hf"))
        f16_relabelled_bf16(self.base_hf / "model.safetensors", dst / "model.safetensors",
                            only="model.layers.0.mlp.down_proj.weight")
        self.add("integrity", "HF safetensors: one weight F16 labelled BF16", dst,
                 refuse=("verify", "convert", "generate"), msg="labelled BF16")
        from runtime.formats.gguf_writer import write_gguf

        f16 = write_gguf(self.model_data, self._path(".gguf"), "F16")
        dst = self._path(".gguf")
        gguf_relabel(f16, dst, 1, 30)
        self.add("integrity", "GGUF: F16 tensors typed BF16", dst, refuse=("convert", "generate"), msg="labelled BF16",
                 mention=())
        bad_tokenizers = [("not JSON", "{oops"), ("a JSON list", "[]"), ("no model", '{"version": "1.0"}'),
                          ("unknown model type", json.dumps({"model": {"type": "Nope"}, "added_tokens": []})),
                          ("vocab of text ids", None), ("ids past the model vocabulary", None)]
        for label, text in bad_tokenizers:
            if text is None:
                doc = json.loads(self.model_data.tokenizer.tokenizer_json)
                if label == "vocab of text ids":
                    doc["model"]["vocab"] = {k: str(v) for k, v in doc["model"]["vocab"].items()}
                else:
                    doc["added_tokens"][-1]["id"] = 5000
                text = json.dumps(doc)
            # an added token declared past the vocabulary is renumbered by the tokenizers library, so the
            # built tokenizer never emits it: generate may work; embedding the inconsistent file may not
            refuse = ("verify", "convert") if label.startswith("ids past") else ("verify", "convert", "generate")
            dst = copy_folder(self.base_hf, self._path(".hf"))
            (dst / "tokenizer.json").write_text(text, encoding="utf-8")
            self.add("integrity", f"HF tokenizer.json {label}", dst, refuse=refuse, msg="tokenizer")
            dst = rewrite_ternary(self.base_ternary, self._path(".ternary"),
                                  lambda h, t=text: h["tokenizer"].__setitem__("tokenizer_json", t))
            self.add("integrity", f".ternary embedded tokenizer {label}", dst, refuse=refuse, msg="tokenizer")

    def build(self) -> list[Case]:
        self.controls()
        self.sizes()
        self.special_files()
        self.types()
        self.integrity()
        return self.cases


def build_corpus(root: Path, model_data: Any, hf_folder: Path, hybrid_data: Any) -> list[Case]:
    return CorpusBuilder(root, model_data, hf_folder, hybrid_data).build()
