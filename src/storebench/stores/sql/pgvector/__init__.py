"""The pgvector store: PostgreSQL with the ``vector`` extension, through
psycopg 3.

A collection is one table ``(id bigint primary key, <fields>, v vector(dim))``;
fields listed in ``Schema.indexed`` get a B-tree index. An insert of up to
32 documents is one prepared multi-row ``INSERT .. ON CONFLICT`` (one round
trip); a larger one is one binary ``COPY``, built column-wise in numpy (no
Python object per document for numeric fields; strings are encoded once
each). Vectors travel in pgvector's binary form both ways, so they
round-trip bit-exact.
``insert_pipelined`` (capability ``pipeline``) sends each batch as one
multi-row ``INSERT .. ON CONFLICT`` in a libpq pipeline (COPY cannot be
pipelined); the pipeline's statements commit together at its one Sync.

``build_index`` creates an HNSW index (``m``, ``ef_construction``) with the
operator class of the collection's metric; ``ef`` sets ``hnsw.ef_search``
on every connection. Without an index, search is an exact scan. Filters
compile to SQL; with an HNSW index pgvector 0.6 filters *after* the index
scan, so a selective filter returns fewer than k rows unless ``ef`` is large
(see docs/engines/pgvector.md).

Without a URL it runs on a managed PostgreSQL 16 + pgvector from the
``pgserver`` wheel (``servers/postgres.py``; started and stopped by
``stores.opening``). With a
URL (``postgresql://user:pass@host:5432/db``, or any libpq connection
string; ``PG*`` environment variables fill in what it leaves out) it only
connects. Credentials never reach records or messages.

Its parts: ``store`` (the connection per thread with its settings, tables,
the managed server), ``collection`` (the SQL of each operation), ``aio``
(the async view, on asyncpg), ``native`` (the native client's requests) and
``codec`` (the binary forms); what SQL engines share (``data.filters.to_sql``)
lives elsewhere.
"""

from storebench.stores.sql.pgvector.codec import copy_binary
from storebench.stores.sql.pgvector.collection import PgVectorCollection
from storebench.stores.sql.pgvector.store import PgVectorStore

__all__ = ["PgVectorCollection", "PgVectorStore", "copy_binary"]
