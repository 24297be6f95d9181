"""Data: columnar document batches, synthetic generators, exact ground truth."""

from storebench.data.batch import DocBatch, Schema

__all__ = ["DocBatch", "Schema"]
