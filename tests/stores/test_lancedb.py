"""LanceDB specifics beyond the conformance suite: the IVF_HNSW index with the
neutral parameters, prefiltered search after indexing, distances per metric,
escaped column names and the where-string compiler."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lancedb")

from storebench.data import filters as F  # noqa: E402
from storebench.data.batch import DocBatch  # noqa: E402
from storebench.data.truth import GroundTruth, distances, recall_at_k  # noqa: E402
from storebench.stores.base import StoreSpec  # noqa: E402
from storebench.stores.params import HnswIndex, HnswSearch  # noqa: E402
from storebench.stores.vector.lancedb import column_name, compile_filter  # noqa: E402
from tests.conftest import make_docs  # noqa: E402


@pytest.fixture
def store(tmp_path: Path):
    s = StoreSpec("lancedb", str(tmp_path / "db")).open()
    yield s
    s.close()


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_indexed_search_recall_and_distances(store, metric):
    docs = make_docs(2000)
    coll = store.create_collection("sb_idx", docs.schema(metric, indexed=("tags.i",)))
    coll.insert(docs)
    coll.build_index(HnswIndex(m=16, ef_construct=200))
    coll.set_search_params(HnswSearch(ef=200))
    queries = make_docs(30, seed=5).vectors
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 20, metric)
    res = coll.search(queries, 10)
    assert recall_at_k(res.ids, truth, 10).mean() >= 0.95
    want = distances(queries, docs.vectors, metric)[np.arange(30)[:, None], res.ids]
    np.testing.assert_allclose(res.distances, want, rtol=1e-3, atol=1e-3)
    assert (np.diff(res.distances, axis=1) >= -1e-6).all()


def test_prefiltered_search_after_index_and_writes(store):
    docs = make_docs(3000)
    coll = store.create_collection("sb_filt", docs.schema(indexed=("tags.i",)))
    coll.insert(docs)
    coll.build_index(HnswIndex(m=16, ef_construct=200))
    coll.set_search_params(HnswSearch(ef=200))
    # writes after the index: new rows are searched too (unindexed part)
    coll.update(DocBatch(docs.ids[:100], {"tags.i": np.full(100, 1, np.int64)}))
    coll.delete(docs.ids[100:200])
    tags = docs.fields["tags.i"].copy()
    tags[:100] = 1
    live = np.ones(len(docs), bool)
    live[100:200] = False
    where = F.Cmp("tags.i", "eq", 1)  # about 5%
    mask = live & (tags == 1)
    queries = make_docs(20, seed=6).vectors
    truth = GroundTruth.compute(docs.ids[mask], docs.vectors[mask], queries, 10, "l2")
    res = coll.search(queries, 10, where)
    assert set(res.ids[res.ids >= 0].tolist()) <= set(docs.ids[mask].tolist())
    assert recall_at_k(res.ids, truth, 10).mean() >= 0.9
    coll.compact()
    assert coll.count() == len(docs) - 100
    assert coll.size_bytes() > 0


def test_padding_when_fewer_than_k_match(store):
    docs = make_docs(50)
    coll = store.create_collection("sb_pad", docs.schema())
    coll.insert(docs)
    res = coll.search(docs.vectors[:3], 10, F.Cmp("tags.i", "lt", 0))
    assert (res.ids == -1).all() and np.isinf(res.distances).all()
    one = int(docs.fields["tags.i"][0])
    n_match = int((docs.fields["tags.i"] == one).sum())
    res = coll.search(docs.vectors[:2], 60, F.Cmp("tags.i", "eq", one))
    assert ((res.ids >= 0).sum(axis=1) == n_match).all()


def test_where_strings_escape_names_and_values():
    cols = {"tags.i": column_name("tags.i"), "label": "label"}
    assert cols["tags.i"] == "tags_x2e_i"
    f = F.And((F.Cmp("label", "eq", "it's"), F.Not(F.In("tags.i", (1, 2)))))
    assert compile_filter(f, cols) == "(`label` = 'it''s' AND NOT (`tags_x2e_i` IN (1, 2)))"
    assert compile_filter(F.Range("tags.i", np.int64(1), 2.5), cols) == (
        "`tags_x2e_i` BETWEEN 1 AND 2.5"
    )


def test_reopens_from_the_resolved_spec(tmp_path: Path):
    s = StoreSpec("lancedb").open()
    docs = make_docs(10)
    s.create_collection("sb_tmp", docs.schema()).insert(docs)
    again = s.spec.open()
    assert again.open_collection("sb_tmp", docs.schema()).count() == 10
    path = s.spec.url
    s.close()
    assert path is not None and not Path(path).exists()
