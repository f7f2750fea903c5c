"""Which embedding model the knowledge base uses, and one lazily loaded copy of it per process.

Why here: the GUI and ``ternary kb`` must pick the same model (the first installed catalog entry
with role "embedding", e.g. Qwen3-Embedding-0.6B) or a base indexed in one would be searched with
other vectors in the other. "Installed" means what the model hub's store lists as verified, the same
rule the model manager uses; a file the user names (``--embed-model``) is taken as given.

Why lazy and locked: loading takes seconds and hundreds of MB, and both the indexing thread and the
chat's retrieval may ask for the model first; :class:`EmbedderHandle` loads it once, on the first
:meth:`~EmbedderHandle.get`, whoever calls. No Qt here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from runtime.embedding import EmbeddingModel
    from runtime.generation import CancelToken

EMBEDDING_ROLE = "embedding"
DEFAULT_MAX_TOKENS = 512  # passages are split well below this; longer texts are truncated by the model


def embedding_files(catalog: Any = None, store: Any = None) -> list[Path]:
    """Installed (verified) files of catalog models with role "embedding", catalog order, default file first.

    ``catalog`` / ``store``: a :class:`runtime.hub.catalog.Catalog` and :class:`runtime.hub.store.ModelStore`
    (default: the user's). A user catalog entry pointing at a local file counts when the file exists.
    """
    from runtime.hub.catalog import Catalog
    from runtime.hub.paths import HubPaths
    from runtime.hub.store import ModelStore

    if catalog is None:
        catalog = Catalog.load(HubPaths.resolve(), with_memory=False)
    if store is None:
        store = ModelStore()
    installed: dict[str, list[Path]] = {}
    for item in store.installed():
        installed.setdefault(item.filename, []).append(item.path)
    found: list[Path] = []
    for model in catalog.models:
        if getattr(model, "role", "") != EMBEDDING_ROLE:
            continue
        if model.local_path and Path(model.local_path).is_file():
            found.append(Path(model.local_path))
        for f in sorted(model.files, key=lambda f: not f.default):
            found += installed.get(f.file, []) + ([] if f.ms_file == f.file else installed.get(f.ms_file, []))
    return list(dict.fromkeys(found))


def find_embedding_model(catalog: Any = None, store: Any = None) -> Path | None:
    """The embedding model the knowledge base uses when none is named; None = full-text search only."""
    files = embedding_files(catalog, store)
    return files[0] if files else None


Loader = Callable[..., "EmbeddingModel"]


def _load_embedding_model(path: Path, device: str, **kwargs: Any) -> EmbeddingModel:
    from runtime.embedding import EmbeddingModel

    return EmbeddingModel.load(path, device, **kwargs)


class SharedEmbedder:
    """An embedding model that several threads may call: one call runs at a time, the others wait.

    Why: :class:`runtime.embedding.EmbeddingModel` is not thread-safe (one owner thread, like the
    engine), but the indexing thread and a chat's retrieval both embed. Everything else
    (``model_id``, ``dim``, ``max_tokens``, ``count_tokens``...) is the model's own.
    """

    def __init__(self, model: EmbeddingModel, lock: threading.RLock) -> None:
        self.model = model
        self._busy = lock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def embed_documents(self, texts: list[str], *, cancel: CancelToken | None = None) -> np.ndarray:
        with self._busy:
            return self.model.embed_documents(texts, cancel=cancel)

    def embed_query(self, text: str, *args: Any, **kwargs: Any) -> np.ndarray:
        with self._busy:
            return self.model.embed_query(text, *args, **kwargs)


class EmbedderHandle:
    """One embedding model, loaded on first use and shared by every thread that asks for it.

    :meth:`get` returns a :class:`SharedEmbedder` (the contract's ``EmbeddingModel`` API, safe to
    call from several threads). ``loader`` (tests) replaces :meth:`runtime.embedding.EmbeddingModel.load`.
    A failed load is not remembered: the next :meth:`get` tries again (the user may have fixed the file).
    """

    def __init__(self, path: str | os.PathLike[str], device: str = "cpu", *,
                 max_tokens: int = DEFAULT_MAX_TOKENS, loader: Loader | None = None) -> None:
        self.path = Path(path)
        self.device = device
        self.max_tokens = max_tokens
        self._loader = loader or _load_embedding_model
        self._shared: SharedEmbedder | None = None
        self._lock = threading.Lock()  # one load at a time
        self._busy = threading.RLock()  # one embedding call at a time (the model is not thread-safe)

    @property
    def loaded(self) -> bool:
        return self._shared is not None

    def get(self, progress: Callable[[str, float], None] | None = None,
            cancel: CancelToken | None = None) -> SharedEmbedder:
        """The model, loading it now if this is the first call (other callers wait for that load)."""
        shared = self._shared
        if shared is not None:
            return shared
        with self._lock:
            if self._shared is None:
                model = self._loader(self.path, self.device, max_tokens=self.max_tokens, progress=progress,
                                     cancel=cancel)
                self._shared = SharedEmbedder(model, self._busy)
            return self._shared

    def close(self) -> None:
        """Release the model once no call is running; a later :meth:`get` loads it again."""
        with self._lock, self._busy:
            shared, self._shared = self._shared, None
        if shared is not None:
            shared.model.close()
