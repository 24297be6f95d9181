"""Stores: the contract (``base``), the filter language, one module per engine."""

from storebench.stores.base import (
    Capability,
    Collection,
    SearchResult,
    Store,
    StoreSpec,
    engine_names,
    store_class,
)

__all__ = [
    "Capability",
    "Collection",
    "SearchResult",
    "Store",
    "StoreSpec",
    "engine_names",
    "store_class",
]
