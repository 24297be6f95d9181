"""Vector databases: Redis (RediSearch), Milvus, Weaviate, qdrant-edge,
LanceDB, Chroma: engines whose own purpose is nearest-neighbour search
with filters."""
