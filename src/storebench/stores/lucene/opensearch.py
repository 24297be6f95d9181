"""The OpenSearch store: 2.x with the k-NN plugin, over ``opensearch-py``.

Vectors are a ``knn_vector`` field (index setting ``index.knn: true``) with
``method: {name: hnsw, engine: lucene, space_type, parameters: {m,
ef_construction}}``; space types ``l2``, ``cosinesimil``, ``innerproduct``.
The ``lucene`` engine is the one that works in the managed distribution (the
faiss and nmslib engines need native libraries it lacks), and it filters during
the graph search. kNN search is the ``knn`` query with ``k`` and
``method_parameters: {ef_search: ef}`` (k-NN 2.16 and later).

Without a URL it runs on a managed single node (``servers.elastic``),
fetched from Maven Central on first use with the k-NN plugin installed; with
one it only connects. Everything else is shared with Elasticsearch: see
``lucene_common``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from opensearchpy import OpenSearch, TransportError
from opensearchpy.serializer import JSONSerializer

from storebench.stores.lucene.common import VECTOR_FIELD, LuceneStore, Request, hnsw_parameters
from storebench.stores.params import HnswIndex

_SPACE = {"l2": "l2", "cosine": "cosinesimil", "ip": "innerproduct"}


class _Orjson(JSONSerializer):
    """The client's JSON serializer on orjson (numpy arrays included)."""

    def loads(self, s: Any) -> Any:
        return orjson.loads(s)

    def dumps(self, data: Any) -> Any:
        if isinstance(data, str | bytes):
            return data
        return orjson.dumps(data, default=self.default, option=orjson.OPT_SERIALIZE_NUMPY)


class OpenSearchStore(LuceneStore):
    engine = "opensearch"
    server = "elastic:OpenSearchServer"
    extra = "opensearch"
    client_dist = "opensearch-py"

    def _connect(self, urls: list[str], auth: tuple[str, str] | None, tls: dict[str, Any]) -> Any:
        return OpenSearch(urls, http_auth=auth, timeout=self.timeout, serializer=_Orjson(), **tls)

    def _send(self, req: Request) -> Any:
        return self.client.transport.perform_request(
            req.method,
            req.path,
            params=req.params,
            body=req.body,
            headers=req.headers,
            timeout=req.timeout,
        )

    def _status(self, exc: Exception) -> int | None:
        if isinstance(exc, TransportError) and isinstance(exc.status_code, int):
            return exc.status_code
        return None

    def _index_settings(self) -> dict[str, Any]:
        return {"knn": True}

    def _vector_mapping(self, dim: int, metric: str, params: HnswIndex) -> dict[str, Any]:
        return {
            "type": "knn_vector",
            "dimension": dim,
            "method": {
                "name": "hnsw",
                "engine": "lucene",
                "space_type": _SPACE[metric],
                "parameters": hnsw_parameters(params),
            },
        }

    def _knn_body(
        self, vector: np.ndarray, k: int, ef: int | None, filt: dict[str, Any] | None
    ) -> dict[str, Any]:
        q: dict[str, Any] = {"vector": vector, "k": k}
        if filt is not None:
            q["filter"] = filt
        if ef is not None:
            q["method_parameters"] = {"ef_search": ef}
        return {"size": k, "_source": False, "query": {"knn": {VECTOR_FIELD: q}}}

    def engine_version(self) -> str:
        info = self._request("GET", "/")
        return f"OpenSearch {info['version']['number']}"
