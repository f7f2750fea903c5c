"""Model hub: catalog, downloads from Hugging Face and ModelScope, verification, model store, tokens.

No Qt here: the GUI's model manager calls these functions from a worker thread and receives
progress through plain callbacks. Entry points: :class:`runtime.hub.catalog.Catalog`,
:func:`runtime.hub.fetch.fetch_model`, :class:`runtime.hub.store.ModelStore`,
:class:`runtime.hub.tokens.TokenStore`, :func:`runtime.hub.recommend.recommend_model`.
"""
