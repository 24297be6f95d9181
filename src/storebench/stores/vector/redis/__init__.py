"""The Redis store: hashes indexed by the search module (RediSearch), through
redis-py.

A collection ``name`` is the hashes ``name:<id>`` (fields as written, the
vector as a float32 blob, the id again as ``_id``) and the search index
``name`` over the prefix ``name:``: numbers (and bools, as 0/1) are NUMERIC,
strings TAG (exact, case-sensitive), the vector a VECTOR attribute. Index
attributes are aliases (``f0``, ``f1``, ...), so any field name works in
queries.

Vector index: a collection created with index parameters (a run's) starts
with the HNSW vector attribute it will be searched with (``m`` -> ``M``,
``ef_construct`` -> ``EF_CONSTRUCTION``), so each HSET inserts its document
into the graph as it arrives (the search module indexes a write before it
replies). Measured (``benchmarks/redis_upload.py``, 100k x 128, m=16,
ef_construction=64, 4 uploaders, a busy 2-core machine): straight into
HNSW, upload 57.9-73.1 s against the server's own HSET time of 52.8-67.2 s
(1.09-1.10x); a FLAT upload then a rebuild 278-409 s (the rebuild's
background scan re-reads every hash). ``build_index`` with
those parameters then builds nothing and says so (the record: index built
during the upload). Without parameters the collection starts with a FLAT
(exact) attribute, searches are exact until ``build_index``, which drops
the index definition (not the documents), re-creates it with HNSW and
waits until the engine reports the background indexing done (``FT.INFO``:
``indexing`` 0, ``percent_indexed`` 1): the index time is the engine's real
build time over the loaded data. ``ef`` becomes the query's ``EF_RUNTIME``.

Writes go out in pipelines (one round trip per batch, no MULTI); searches
of several query vectors too. ``insert_pipelined`` (capability ``pipeline``)
puts several batches' HSETs in one such pipeline on one connection: each
HSET is a request of its own, none waits for another's reply. Filters compile to the query language
(DIALECT 2): numeric ranges, TAG sets, ``-`` for not, ``|`` for or; a
filtered search is a hybrid query ``(<filter>)=>[KNN k @v $B]``.

Distances: RediSearch's L2 is the squared distance (its square root is
returned), IP is ``1 - dot`` (returned as ``-dot``), COSINE is ``1 - cos``.

Without a URL it runs on a managed Redis (``servers/redis.py``; started
and stopped by ``stores.opening``); with ``redis://[:password@]host:port/db`` it only
connects (``REDIS_PASSWORD`` fills in a password the URL leaves out). It
never flushes a database: ``drop`` removes its own index and the keys
``name:<integer>`` only.

Its parts: ``store`` (the client, the write path's connections, own keys,
the managed server), ``collection`` (the index lifecycle, writes, reads,
searches), ``aio`` (the async view), ``native`` (the native client's
requests) and ``codec`` (the query compiler, RESP arguments).
"""

from storebench.stores.vector.redis.codec import to_query
from storebench.stores.vector.redis.collection import RedisCollection
from storebench.stores.vector.redis.store import REDIS_URL, RedisStore

__all__ = ["REDIS_URL", "RedisCollection", "RedisStore", "to_query"]
