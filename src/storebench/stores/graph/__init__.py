"""Graph databases: kuzu (embedded), FalkorDB and agdb (servers). A
reference field is an edge; ``cypher.py`` holds the Cypher plumbing of
kuzu and FalkorDB."""
