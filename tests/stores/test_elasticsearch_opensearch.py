"""Elasticsearch and OpenSearch (with the k-NN plugin) beyond the conformance
suite: the managed node's lifecycle (start, stop, kill -9, nothing left
behind), other people's indices, bulk requests that really batch, the merge
build_index waits for, deep pages, kNN parameters, options and the filter
compiler; then what only one of them has (OpenSearch's installed plugin,
each one's vector mapping). The checks themselves are in ``servers_java``."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any

import psutil
import pytest

from storebench.data import filters as F
from storebench.errors import UserError
from storebench.stores.base import StoreSpec
from storebench.stores.lucene.common import to_query
from tests.stores import servers as S
from tests.stores import servers_java as J


@dataclass(frozen=True)
class Engine:
    client: str  # the module of the engine's own Python client
    title: str  # as its version string names it
    ef: str  # its name for ef in a kNN request


ENGINES = {
    "elasticsearch": Engine("elasticsearch", "Elasticsearch", "num_candidates"),
    "opensearch": Engine("opensearchpy", "OpenSearch", "ef_search"),
}


def _use(engine: str) -> str:
    """The engine, or a skip: STOREBENCH_SKIP_ENGINES names it or its client
    library is missing."""
    if S.skipped(engine):
        pytest.skip("STOREBENCH_SKIP_ENGINES")
    pytest.importorskip(ENGINES[engine].client)
    return engine


@pytest.fixture(params=list(ENGINES))
def engine(request: pytest.FixtureRequest) -> str:
    return _use(request.param)


class Someone:
    """Another program using the engine through the engine's own client: it
    plants indices (in three segments), looks at them and removes them."""

    SETTINGS = {"number_of_shards": 1, "number_of_replicas": 0}
    MAPPINGS = {"properties": {"note": {"type": "keyword"}, "n": {"type": "long"}}}

    def __init__(self, engine: str):
        self.es = engine == "elasticsearch"
        if self.es:
            from elasticsearch import Elasticsearch

            self.c: Any = Elasticsearch(S.shared_url(engine))
        else:
            from opensearchpy import OpenSearch

            self.c = OpenSearch([S.shared_url(engine)])

    def plant(self, name: str, n: int) -> None:
        if self.es:
            self.c.indices.create(index=name, settings=self.SETTINGS, mappings=self.MAPPINGS)
        else:
            self.c.indices.create(
                index=name, body={"settings": self.SETTINGS, "mappings": self.MAPPINGS}
            )
        for part in range(3):  # three refreshes: three segments
            ops: list[dict[str, Any]] = []
            for i in range(part, n, 3):
                ops += [{"index": {"_index": name, "_id": str(i)}}, {"note": f"n{i}", "n": i}]
            if self.es:
                self.c.bulk(operations=ops, refresh=True)
            else:
                self.c.bulk(body=ops, refresh=True)

    def snapshot(self) -> Any:
        indices = sorted(
            (r["index"], r["docs.count"])
            for r in self.c.cat.indices(format="json", h="index,docs.count")
        )
        if self.es:
            found = self.c.search(index="someone_elses", size=100, sort=["n"])
        else:
            found = self.c.search(index="someone_elses", body={"size": 100, "sort": ["n"]})
        return indices, [(d["_id"], d["_source"]) for d in found["hits"]["hits"]]

    def remove(self, name: str) -> None:
        self.c.indices.delete(index=name, ignore_unavailable=True)


@pytest.fixture
def someone(engine: str):
    other = Someone(engine)
    yield other
    other.c.close()


# --- both engines -------------------------------------------------------------------


def jvm_files_in_tmp() -> set[str]:
    """What the JVMs would leave in /tmp: the launcher's final-flags*
    directories, and perf-data files and attach sockets (.java_pid<pid>) of
    JVMs that are gone (a live one's, another test's server, is no leftover)."""

    def gone(f: str) -> bool:
        pid = os.path.basename(f).removeprefix(".java_pid")
        return not (pid.isdigit() and psutil.pid_exists(int(pid)))

    per_pid = glob.glob("/tmp/hsperfdata_*/*") + glob.glob("/tmp/.java_pid*")
    return set(glob.glob("/tmp/final-flags*") + [f for f in per_pid if gone(f)])


def test_managed_server_starts_serves_and_stops_leaving_nothing_in_tmp(engine):
    before = jvm_files_in_tmp()
    S.check_managed(StoreSpec(engine))
    assert not jvm_files_in_tmp() - before


def test_a_killed_server_fails_the_run_quickly_with_its_log(engine, tmp_path, monkeypatch):
    before = jvm_files_in_tmp()
    rec = J.check_killed_server(engine, tmp_path, monkeypatch)
    assert ENGINES[engine].title in rec["versions"]["engine"]
    assert not jvm_files_in_tmp() - before


def test_the_node_listens_on_localhost_only_and_runs_unprivileged(engine):
    J.check_localhost_and_unprivileged(engine)


def test_foreign_indices_survive_a_crud_run_by_url(engine, tmp_path, someone):
    J.check_foreign_data_survives(engine, tmp_path, someone.plant, someone.snapshot, someone.remove)


def test_compaction_merges_only_its_own_index(engine, someone):
    J.check_compact_touches_only_its_own_index(engine, someone.plant, someone.remove)


def test_an_unreachable_url_is_one_clear_error_without_the_password(engine):
    J.check_unreachable_url(engine)


def test_a_batch_is_one_bulk_request_and_every_document_arrives(engine):
    J.check_bulk_is_one_request_and_all_arrive(engine)


def test_build_index_returns_with_one_merged_segment(engine):
    J.check_build_index_leaves_one_segment(engine)


def test_find_returns_every_match_past_one_page(engine):
    J.check_find_past_one_page(engine)


def test_fractional_bounds_on_integer_fields_match_numpy(engine):
    J.check_fractions_on_int_fields(engine)


def test_ef_reaches_the_knn_request_under_the_engines_name(engine):
    J.check_search_params(engine, ENGINES[engine].ef)


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_hnsw_index_reaches_the_recall_with_exact_distances(engine, metric):
    # the same data and parameters give a different graph build to build,
    # more so under load: recall@10 0.994-1.0 idle, 0.956-1.0 beside three
    # busy loops, 0.93 once in a full suite run; the bound is for an index
    # that works, not a tuned one, and the distances are checked exactly
    assert S.check_ann(J.spec(engine), J.INDEX.given(), 200, metric) >= 0.9


def test_unknown_options_and_bad_urls_are_user_errors_before_any_connection(engine):
    with pytest.raises(UserError, match="unknown option parameter 'bogus'"):
        StoreSpec(engine, "http://127.0.0.1:1", options={"bogus": 1}).open()
    with pytest.raises(UserError, match=f"option refresh of {engine}: Input should be 'auto'"):
        StoreSpec(engine, "http://127.0.0.1:1", options={"refresh": "sometimes"}).open()
    with pytest.raises(UserError, match=r"expected http\(s\)://") as err:
        StoreSpec(engine, "es://u:s3cret@host:9200").open()
    assert "s3cret" not in str(err.value)


def test_refresh_wait_for_makes_each_write_visible_by_itself(engine):
    store = J.spec(engine, options={"refresh": "wait_for"}).open()
    try:
        docs = J.make_docs(40)
        coll = store.create_collection("sb_visible", docs.schema())
        coll.insert(docs)
        assert not store._dirty  # nothing left for a read to refresh
        assert len(coll.find(F.Cmp("tags.i", "ge", 0))) == 40
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


# --- one engine -----------------------------------------------------------------------


def test_opensearch_has_the_knn_plugin_installed_without_painless():
    someone = Someone(_use("opensearch"))
    try:
        plugins = {p["component"] for p in someone.c.cat.plugins(format="json")}
        assert plugins == {"opensearch-knn"}
    finally:
        someone.c.close()


def test_elasticsearch_vector_mapping_is_full_float_hnsw_with_the_given_parameters():
    store = J.spec(_use("elasticsearch")).open()
    try:
        coll = store.create_collection("sb_mapping", J.make_docs(5).schema("cosine"), J.INDEX)
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


def test_opensearch_vector_mapping_is_lucene_hnsw_with_the_given_parameters():
    store = J.spec(_use("opensearch")).open()
    try:
        coll = store.create_collection("sb_mapping", J.make_docs(5).schema("ip"), J.INDEX)
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
