"""OpenSearch (with the k-NN plugin) beyond the conformance suite: the
managed node's lifecycle (start, stop, kill -9, nothing left behind), the
installed plugin, other people's indices, bulk requests that really batch,
the merge build_index waits for, deep pages and kNN parameters."""

import pytest

pytest.importorskip("opensearchpy")

from opensearchpy import OpenSearch  # noqa: E402

from storebench.stores.base import StoreSpec  # noqa: E402
from tests.stores import servers as S  # noqa: E402
from tests.stores import servers_java as J  # noqa: E402

ENGINE = "opensearch"
pytestmark = pytest.mark.skipif(S.skipped(ENGINE), reason="STOREBENCH_SKIP_ENGINES")


@pytest.fixture
def client():
    c = OpenSearch([S.shared_url(ENGINE)])
    yield c
    c.close()


def _plant(c):
    def plant(name, n):
        c.indices.create(
            index=name,
            body={
                "settings": {"number_of_shards": 1, "number_of_replicas": 0},
                "mappings": {"properties": {"note": {"type": "keyword"}, "n": {"type": "long"}}},
            },
        )
        for part in range(3):  # three refreshes: three segments
            ops = []
            for i in range(part, n, 3):
                ops += [{"index": {"_index": name, "_id": str(i)}}, {"note": f"n{i}", "n": i}]
            c.bulk(body=ops, refresh=True)

    return plant


def _snapshot(c):
    def snapshot():
        indices = sorted(
            (r["index"], r["docs.count"])
            for r in c.cat.indices(format="json", h="index,docs.count")
        )
        docs = c.search(index="someone_elses", body={"size": 100, "sort": ["n"]})["hits"]["hits"]
        return indices, [(d["_id"], d["_source"]) for d in docs]

    return snapshot


def _remove(c):
    def remove(name):
        c.indices.delete(index=name, ignore_unavailable=True)

    return remove


def test_managed_server_starts_serves_and_stops():
    S.check_managed(StoreSpec(ENGINE))


def test_a_killed_server_fails_the_run_quickly_with_its_log(tmp_path, monkeypatch):
    rec = J.check_killed_server(ENGINE, tmp_path, monkeypatch)
    assert "OpenSearch" in rec["versions"]["engine"]


def test_the_node_listens_on_localhost_only_and_runs_unprivileged():
    J.check_localhost_and_unprivileged(ENGINE)


def test_the_knn_plugin_is_installed_without_painless(client):
    plugins = {p["component"] for p in client.cat.plugins(format="json")}
    assert plugins == {"opensearch-knn"}


def test_foreign_indices_survive_a_crud_run_by_url(tmp_path, client):
    J.check_foreign_data_survives(
        ENGINE, tmp_path, _plant(client), _snapshot(client), _remove(client)
    )


def test_compaction_merges_only_its_own_index(client):
    J.check_compact_touches_only_its_own_index(ENGINE, _plant(client), _remove(client))


def test_an_unreachable_url_is_one_clear_error_without_the_password():
    J.check_unreachable_url(ENGINE)


def test_a_batch_is_one_bulk_request_and_every_document_arrives():
    J.check_bulk_is_one_request_and_all_arrive(ENGINE)


def test_build_index_returns_with_one_merged_segment():
    J.check_build_index_leaves_one_segment(ENGINE)


def test_find_returns_every_match_past_one_page():
    J.check_find_past_one_page(ENGINE)


def test_fractional_bounds_on_integer_fields_match_numpy():
    J.check_fractions_on_int_fields(ENGINE)


def test_ef_is_ef_search():
    J.check_search_params(ENGINE, "ef_search")


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_hnsw_index_reaches_the_recall_with_exact_distances(metric):
    assert S.check_ann(J.spec(ENGINE), J.INDEX, 200, metric) >= 0.95


def test_vector_mapping_is_lucene_hnsw_with_the_given_parameters():
    store = J.spec(ENGINE).open()
    try:
        coll = store.create_collection("sb_mapping", J.make_docs(5).schema("ip"))
        m = store._request("GET", "/sb_mapping/_mapping")["sb_mapping"]["mappings"]
        vec = m["properties"]["sb_vec"]
        assert vec["type"] == "knn_vector" and vec["dimension"] == 16
        assert vec["method"] == {
            "engine": "lucene",
            "space_type": "innerproduct",
            "name": "hnsw",
            "parameters": {"m": 16, "ef_construction": 200},
        }
        coll.drop()
    finally:
        store.close()
