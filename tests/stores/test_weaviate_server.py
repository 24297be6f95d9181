"""The managed Weaviate server (built from the Go module proxy) with the
official client: a collection with an HNSW config, insert, near_vector;
nothing reachable from outside; no orphan."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from storebench.servers import weaviate as W
from tests.stores import servers as S
from tests.stores.server_checks import listening_ips, no_orphan_after_sigkill, stop_leaves_nothing

pytestmark = pytest.mark.skipif(S.skipped("weaviate"), reason="STOREBENCH_SKIP_ENGINES")


def connect(url: str):  # type: ignore[no-untyped-def]
    import weaviate

    parts = urlsplit(url)
    grpc_port = int(parse_qs(parts.query)["grpc_port"][0])
    return weaviate.connect_to_custom(
        http_host=parts.hostname,
        http_port=parts.port,
        http_secure=False,
        grpc_host=parts.hostname,
        grpc_port=grpc_port,
        grpc_secure=False,
    )


def test_the_server_binary_is_built():
    # set-up builds it (python -m storebench.servers.weaviate --install)
    assert W.BUILT.installed() and W.BUILT.binary.is_file()


def test_weaviate_serves_the_official_client_on_loopback_only_and_stops_clean():
    from weaviate.classes.config import Configure, DataType, Property, VectorDistances
    from weaviate.classes.query import Filter, MetadataQuery

    server = W.WeaviateServer().start()
    try:
        assert server.engine_version == f"Weaviate {W.VERSION.lstrip('v')}"
        assert listening_ips(server) == {"127.0.0.1"}
        rng = np.random.default_rng(7)
        vectors = rng.random((500, 16), dtype=np.float32)
        client = connect(server.url)
        try:
            assert client.is_ready()
            coll = client.collections.create(
                "SbServer",
                properties=[Property(name="tag", data_type=DataType.INT)],
                vector_config=Configure.Vectors.self_provided(
                    vector_index_config=Configure.VectorIndex.hnsw(
                        max_connections=16,
                        ef_construction=64,
                        ef=64,
                        distance_metric=VectorDistances.L2_SQUARED,
                    )
                ),
            )
            hnsw = coll.config.get().vector_config["default"].vector_index_config
            assert (hnsw.max_connections, hnsw.ef_construction, hnsw.ef) == (16, 64, 64)
            with coll.batch.fixed_size(200) as batch:
                for i in range(500):
                    batch.add_object({"tag": i % 10}, vector=vectors[i].tolist())
            assert not coll.batch.failed_objects
            assert len(coll) == 500
            res = coll.query.near_vector(
                vectors[42].tolist(), limit=3, return_metadata=MetadataQuery(distance=True)
            )
            assert res.objects[0].properties["tag"] == 2
            assert res.objects[0].metadata.distance == pytest.approx(0.0, abs=1e-4)
            res = coll.query.near_vector(
                vectors[42].tolist(), limit=5, filters=Filter.by_property("tag").equal(3)
            )
            assert res.objects and all(o.properties["tag"] == 3 for o in res.objects)
            client.collections.delete("SbServer")
        finally:
            client.close()
    finally:
        stop_leaves_nothing(server)


def test_no_orphan_when_storebench_is_killed():
    no_orphan_after_sigkill("storebench.servers.weaviate", "WeaviateServer")
