"""SQL engines: SQLite (and sqlite-vec), DuckDB, PostgreSQL + pgvector,
MariaDB. Filters compile with ``data.filters.to_sql``; ``sqlite.py`` holds
the SQLite plumbing sqlite-vec shares."""
