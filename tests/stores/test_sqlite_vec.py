"""sqlite-vec specifics beyond the conformance suite: exact cosine distances,
ip refused, exact filtered search under an OR/NOT filter, size counting the
vec0 shadow tables, upsert replacing the vector."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("apsw")
pytest.importorskip("sqlite_vec")

from storebench.data import filters as F  # noqa: E402
from storebench.data.truth import GroundTruth, distances, recall_at_k  # noqa: E402
from storebench.errors import NotSupported  # noqa: E402
from storebench.stores.base import StoreSpec  # noqa: E402
from tests.conftest import make_docs  # noqa: E402


@pytest.fixture
def store(tmp_path: Path):
    s = StoreSpec("sqlite-vec", str(tmp_path / "v.db")).open()
    yield s
    s.close()


def test_cosine_is_exact_and_ip_is_refused(store):
    docs = make_docs(300)
    coll = store.create_collection("sb_cos", docs.schema("cosine"))
    coll.insert(docs)
    queries = make_docs(10, seed=3).vectors
    res = coll.search(queries, 5)
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 20, "cosine")
    assert recall_at_k(res.ids, truth, 5).mean() == 1.0
    want = distances(queries, docs.vectors, "cosine")[np.arange(10)[:, None], res.ids]
    np.testing.assert_allclose(res.distances, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(NotSupported, match="metric ip"):
        store.create_collection("sb_ip", docs.schema("ip"))


def test_filtered_search_is_exact_under_or_and_not(store):
    docs = make_docs(500)
    coll = store.create_collection("sb_f", docs.schema())
    coll.insert(docs)
    where = F.Or((F.Not(F.Range("tags.i", 3, 49)), F.Cmp("label", "eq", "l2")))
    mask = F.evaluate(where, docs.fields)
    queries = make_docs(10, seed=4).vectors
    truth = GroundTruth.compute(docs.ids[mask], docs.vectors[mask], queries, 10, "l2")
    res = coll.search(queries, 10, where)
    assert set(res.ids.ravel().tolist()) <= set(docs.ids[mask].tolist())
    assert recall_at_k(res.ids, truth, 10).mean() == 1.0


def test_upsert_replaces_vector_and_size_counts_shadow_tables(store):
    docs = make_docs(200)
    coll = store.create_collection("sb_u", docs.schema())
    coll.insert(docs)
    small = coll.size_bytes()
    assert small >= docs.vectors.nbytes  # the vectors live in vec0's shadow tables
    again = make_docs(200, seed=1)
    coll.insert(again.take(np.arange(5)))
    got = coll.get(np.arange(5, dtype=np.int64)).sorted_by_id()
    assert got.vectors.tobytes() == again.vectors[:5].tobytes()
    assert coll.count() == 200
