"""Weaviate beyond the conformance suite: the managed server's lifecycle
through the store, HNSW recall with exact distances for each metric, the
HNSW parameters reaching the collection, and the URL's gRPC port."""

from __future__ import annotations

import pytest

from storebench.errors import UserError
from storebench.stores.base import StoreSpec
from storebench.stores.params import HnswIndex, HnswSearch
from storebench.stores.vector.weaviate import WeaviateStore, from_uuid, to_uuid
from tests.conftest import make_docs
from tests.stores import servers as S

pytestmark = pytest.mark.skipif(S.skipped("weaviate"), reason="STOREBENCH_SKIP_ENGINES")


def test_managed_server_starts_serves_and_stops():
    S.check_managed(StoreSpec("weaviate"))


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_hnsw_reaches_the_recall_with_exact_distances(metric):
    spec = StoreSpec("weaviate", S.shared_url("weaviate"))
    assert S.check_ann(spec, {"m": 16, "ef_construct": 128}, ef=128, metric=metric) >= 0.9


def test_index_parameters_reach_the_collection_and_other_ones_rebuild_it():
    spec = StoreSpec("weaviate", S.shared_url("weaviate"))
    store = spec.open()
    try:
        docs = make_docs(300)
        coll = store.create_collection("sb_params", docs.schema(), HnswIndex(m=8, ef_construct=32))
        coll.insert(docs)
        assert coll.hnsw()["m"] == 8 and coll.hnsw()["ef_construct"] == 32  # type: ignore[attr-defined]
        assert coll.build_index(HnswIndex(m=8, ef_construct=32)) is False  # built during the upload
        assert coll.build_index(HnswIndex(m=24, ef_construct=100)) is True
        assert coll.hnsw()["m"] == 24 and coll.count() == 300  # type: ignore[attr-defined]
        coll.set_search_params(HnswSearch(ef=77))
        assert coll.hnsw()["ef"] == 77  # type: ignore[attr-defined]
        res = coll.search(docs.vectors[:3], 1)
        assert res.ids[:, 0].tolist() == [0, 1, 2]
        coll.drop()
    finally:
        store.close()


def test_ids_map_to_uuids_both_ways():
    for i in (0, 1, 2**63 - 1, -1, -(2**63)):
        assert from_uuid(to_uuid(i)) == i


def test_the_url_names_the_grpc_port():
    assert WeaviateStore.check_url("http://h:8080?grpc_port=50052") == ("h", 8080, 50052)
    assert WeaviateStore.check_url("http://h:8080") == ("h", 8080, 50051)
    with pytest.raises(UserError):
        WeaviateStore.check_url("http://h:8080?grpc=1")
