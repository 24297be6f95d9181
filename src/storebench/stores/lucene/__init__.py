"""Lucene-based search servers with one REST API: Elasticsearch and
OpenSearch differ only in their client, server distribution and a few
parameters (``common.py`` holds everything else)."""
