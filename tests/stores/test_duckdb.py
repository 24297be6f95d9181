"""DuckDB + vss specifics beyond the conformance suite: the query shape uses
the HNSW index once built, per-metric distances through the index, filtered
search stays exact (vss would post-filter), ef reaches every thread's
connection, writes and compaction after indexing."""

import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("duckdb")

from storebench.data import filters as F  # noqa: E402
from storebench.data.batch import DocBatch  # noqa: E402
from storebench.data.truth import GroundTruth, distances, recall_at_k  # noqa: E402
from storebench.stores.base import StoreSpec  # noqa: E402
from storebench.stores.params import HnswIndex, HnswSearch  # noqa: E402
from tests.conftest import make_docs  # noqa: E402


@pytest.fixture
def store(tmp_path: Path):
    s = StoreSpec("duckdb", str(tmp_path / "d")).open()
    yield s
    s.close()


def _plan(coll, q: np.ndarray) -> str:
    sql = (
        f"EXPLAIN SELECT id, {coll._dist}(vec, ?::{coll._qtype}) AS d "
        f'FROM "{coll.name}" ORDER BY d LIMIT 10'
    )
    return coll._db.execute(sql, [q.tolist()]).fetchall()[0][1]


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_index_is_used_with_the_contract_distances(store, metric):
    docs = make_docs(2000)
    coll = store.create_collection("sb_idx", docs.schema(metric, indexed=("tags.i",)))
    coll.insert(docs)
    queries = make_docs(30, seed=5).vectors
    assert "HNSW_INDEX_SCAN" not in _plan(coll, queries[0])
    # generous: HNSW over inner product (not a metric) needs more than l2/cosine
    coll.build_index(HnswIndex(m=32, ef_construct=400))
    plan = _plan(coll, queries[0])
    assert "HNSW_INDEX_SCAN" in plan
    assert "HASH_JOIN" not in plan, "late materialization joins the top k to a full scan"
    coll.set_search_params(HnswSearch(ef=1000))
    res = coll.search(queries, 10)
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 20, metric)
    assert recall_at_k(res.ids, truth, 10).mean() >= 0.95
    want = distances(queries, docs.vectors, metric)[np.arange(30)[:, None], res.ids]
    np.testing.assert_allclose(res.distances, want, rtol=1e-3, atol=1e-3)


def test_filtered_search_is_exact_after_index_and_writes(store):
    docs = make_docs(3000)
    coll = store.create_collection("sb_f", docs.schema(indexed=("tags.i",)))
    coll.insert(docs)
    coll.build_index(HnswIndex(m=8, ef_construct=32))
    coll.update(DocBatch(docs.ids[:100], {"tags.i": np.full(100, 1, np.int64)}, docs.vectors[:100]))
    coll.delete(docs.ids[100:200])
    tags = docs.fields["tags.i"].copy()
    tags[:100] = 1
    mask = tags == 1
    mask[100:200] = False
    queries = make_docs(20, seed=6).vectors
    truth = GroundTruth.compute(docs.ids[mask], docs.vectors[mask], queries, 10, "l2")
    res = coll.search(queries, 10, F.Cmp("tags.i", "eq", 1))
    assert recall_at_k(res.ids, truth, 10).mean() == 1.0
    coll.compact()
    assert coll.count() == len(docs) - 100
    _ = coll.search(queries, 10)  # the compacted index still answers


def test_ef_reaches_every_thread(store):
    docs = make_docs(500)
    coll = store.create_collection("sb_t", docs.schema())
    coll.insert(docs)
    coll.build_index(HnswIndex())
    coll.set_search_params(HnswSearch(ef=77))
    seen = []

    def probe():
        coll.search(docs.vectors[:1], 3)
        seen.append(coll._db.execute("SELECT current_setting('hnsw_ef_search')").fetchone()[0])

    threads = [threading.Thread(target=probe) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [77, 77, 77]


def test_each_collection_is_its_own_file(store):
    docs = make_docs(50)
    coll = store.create_collection("sb_file", docs.schema())
    coll.insert(docs)
    path = Path(store.spec.url) / "sb_file.duckdb"
    assert path.exists() and coll.size_bytes() >= path.stat().st_size
    coll.drop()
    assert not path.exists()
