"""Elasticsearch beyond the conformance suite: the managed node's lifecycle
(start, stop, kill -9, nothing left behind), other people's indices, bulk
requests that really batch, the merge build_index waits for, deep pages,
kNN parameters and the filter compiler."""

import pytest

pytest.importorskip("elasticsearch")

from elasticsearch import Elasticsearch  # noqa: E402

from storebench.stores import filters as F  # noqa: E402
from storebench.stores.base import StoreSpec  # noqa: E402
from storebench.stores.lucene_common import to_query  # noqa: E402
from tests.stores import servers as S  # noqa: E402
from tests.stores import servers_java as J  # noqa: E402

ENGINE = "elasticsearch"
pytestmark = pytest.mark.skipif(S.skipped(ENGINE), reason="STOREBENCH_SKIP_ENGINES")


@pytest.fixture
def es():
    client = Elasticsearch(S.shared_url(ENGINE))
    yield client
    client.close()


def _plant(es):
    def plant(name, n):
        es.indices.create(
            index=name,
            settings={"number_of_shards": 1, "number_of_replicas": 0},
            mappings={"properties": {"note": {"type": "keyword"}, "n": {"type": "long"}}},
        )
        for part in range(3):  # three refreshes: three segments
            ops = []
            for i in range(part, n, 3):
                ops += [{"index": {"_index": name, "_id": str(i)}}, {"note": f"n{i}", "n": i}]
            es.bulk(operations=ops, refresh=True)

    return plant


def _snapshot(es):
    def snapshot():
        indices = sorted(
            (r["index"], r["docs.count"])
            for r in es.cat.indices(format="json", h="index,docs.count")
        )
        docs = es.search(index="someone_elses", size=100, sort=["n"])["hits"]["hits"]
        return indices, [(d["_id"], d["_source"]) for d in docs]

    return snapshot


def _remove(es):
    def remove(name):
        es.indices.delete(index=name, ignore_unavailable=True)

    return remove


def test_managed_server_starts_serves_and_stops():
    S.check_managed(StoreSpec(ENGINE))


def test_a_killed_server_fails_the_run_quickly_with_its_log(tmp_path, monkeypatch):
    rec = J.check_killed_server(ENGINE, tmp_path, monkeypatch)
    assert "Elasticsearch" in rec["versions"]["engine"]


def test_the_node_listens_on_localhost_only_and_runs_unprivileged():
    J.check_localhost_and_unprivileged(ENGINE)


def test_foreign_indices_survive_a_crud_run_by_url(tmp_path, es):
    J.check_foreign_data_survives(ENGINE, tmp_path, _plant(es), _snapshot(es), _remove(es))


def test_compaction_merges_only_its_own_index(es):
    J.check_compact_touches_only_its_own_index(ENGINE, _plant(es), _remove(es))


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


def test_ef_is_num_candidates():
    J.check_search_params(ENGINE, "num_candidates")


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_hnsw_index_reaches_the_recall_with_exact_distances(metric):
    assert S.check_ann(J.spec(ENGINE), J.INDEX, 200, metric) >= 0.95


def test_vector_mapping_is_full_float_hnsw_with_the_given_parameters():
    store = J.spec(ENGINE).open()
    try:
        coll = store.create_collection("sb_mapping", J.make_docs(5).schema("cosine"))
        m = store._request("GET", "/sb_mapping/_mapping")["sb_mapping"]["mappings"]
        assert m["properties"]["sb_vec"] == {
            "type": "dense_vector",
            "dims": 16,
            "index": True,
            "similarity": "cosine",
            "index_options": {"type": "hnsw", "m": 16, "ef_construction": 200},
        }
        assert m["properties"]["label"] == {"type": "keyword"}
        coll.drop()
    finally:
        store.close()


def test_filters_compile_to_bool_queries():
    f = F.And(
        (
            F.Range("tags.i", 1, 5),
            F.Or((F.Cmp("score", "lt", 0.5), F.Not(F.In("label", ("a", "b"))))),
            F.Cmp("label", "ne", "c"),
        )
    )
    assert to_query(f) == {
        "bool": {
            "filter": [
                {"range": {"tags.i": {"gte": 1, "lte": 5}}},
                {
                    "bool": {
                        "should": [
                            {"range": {"score": {"lt": 0.5}}},
                            {"bool": {"must_not": [{"terms": {"label": ["a", "b"]}}]}},
                        ],
                        "minimum_should_match": 1,
                    }
                },
                {"bool": {"must_not": [{"term": {"label": "c"}}]}},
            ]
        }
    }
    assert to_query(F.In("tags.i", ())) == {"match_none": {}}


def test_unknown_options_and_bad_urls_are_user_errors_before_any_connection():
    from storebench.errors import UserError

    with pytest.raises(UserError, match="unknown option 'bogus'"):
        StoreSpec(ENGINE, "http://127.0.0.1:1", options={"bogus": 1}).open()
    with pytest.raises(UserError, match="refresh must be"):
        StoreSpec(ENGINE, "http://127.0.0.1:1", options={"refresh": "sometimes"}).open()
    with pytest.raises(UserError, match=r"expected http\(s\)://") as err:
        StoreSpec(ENGINE, "es://u:s3cret@host:9200").open()
    assert "s3cret" not in str(err.value)


def test_refresh_wait_for_makes_each_write_visible_by_itself():
    store = J.spec(ENGINE, options={"refresh": "wait_for"}).open()
    try:
        docs = J.make_docs(40)
        coll = store.create_collection("sb_visible", docs.schema())
        coll.insert(docs)
        assert not store._dirty  # nothing left for a read to refresh
        assert len(coll.find(F.Cmp("tags.i", "ge", 0))) == 40
        coll.drop()
    finally:
        store.close()
