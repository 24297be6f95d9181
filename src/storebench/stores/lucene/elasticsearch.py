"""The Elasticsearch store: 8.x over the official ``elasticsearch`` client.

Vectors are a ``dense_vector`` field with ``index: true`` and
``index_options: {type: hnsw, m, ef_construction}`` (full float32 HNSW: 8.x
otherwise defaults to the int8-quantised ``int8_hnsw``); the metric's
similarity is ``l2_norm``, ``cosine`` or ``max_inner_product``. kNN search is
the top-level ``knn`` section with ``num_candidates`` = ``ef`` (at least k; the
engine's default, 1.5 k, without ``ef``) and the filter inside it, so
filtering happens during the graph search, not after it.

Without a URL it runs on a managed single node (``servers.elastic``),
fetched from Maven Central on first use; with one (``http://user:pass@host:9200``)
it only connects. Everything else is shared with OpenSearch: see
``lucene_common``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from elasticsearch import ApiError, Elasticsearch
from elasticsearch.serializer import OrjsonSerializer

from storebench.stores.lucene.common import VECTOR_FIELD, LuceneStore, Request, hnsw_parameters
from storebench.stores.params import HnswIndex

_SIMILARITY = {"l2": "l2_norm", "cosine": "cosine", "ip": "max_inner_product"}


class ElasticsearchStore(LuceneStore):
    engine = "elasticsearch"
    server = "elastic:ElasticsearchServer"
    extra = "elasticsearch"
    client_dist = "elasticsearch"

    def _connect(self, urls: list[str], auth: tuple[str, str] | None, tls: dict[str, Any]) -> Any:
        return Elasticsearch(
            urls,
            basic_auth=auth,
            request_timeout=self.timeout,
            serializer=OrjsonSerializer(),
            **tls,
        )

    def _send(self, req: Request) -> Any:
        client = self.client
        if req.timeout != self.timeout:
            client = client.options(request_timeout=req.timeout)
        return client.perform_request(
            req.method, req.path, params=req.params, headers=req.headers, body=req.body
        ).body

    def _status(self, exc: Exception) -> int | None:
        return exc.meta.status if isinstance(exc, ApiError) else None

    def _vector_mapping(self, dim: int, metric: str, params: HnswIndex) -> dict[str, Any]:
        return {
            "type": "dense_vector",
            "dims": dim,
            "index": True,
            "similarity": _SIMILARITY[metric],
            "index_options": {"type": "hnsw", **hnsw_parameters(params)},
        }

    def _knn_body(
        self, vector: np.ndarray, k: int, ef: int | None, filt: dict[str, Any] | None
    ) -> dict[str, Any]:
        knn: dict[str, Any] = {"field": VECTOR_FIELD, "query_vector": vector, "k": k}
        if ef is not None:
            knn["num_candidates"] = max(ef, k)
        if filt is not None:
            knn["filter"] = filt
        return {"knn": knn, "size": k, "_source": False}

    def engine_version(self) -> str:
        # GET / (client.info) answers 405 in the integ-test distribution
        try:
            nodes = self._request("GET", "/_nodes/_local", {"filter_path": "nodes.*.version"})
            return f"Elasticsearch {next(iter(nodes['nodes'].values()))['version']}"
        except Exception:
            info = self._request("GET", "/")
            return f"Elasticsearch {info['version']['number']}"
