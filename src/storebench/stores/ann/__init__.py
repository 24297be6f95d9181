"""In-process ANN index libraries (hnswlib, faiss, usearch): vectors only,
fields and filters kept beside the index by ``indexlib.IndexStore``, which
each ~100-line adapter subclasses."""
