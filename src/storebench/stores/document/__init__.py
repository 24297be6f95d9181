"""Document stores: MongoDB (any server; FerretDB managed), mongita
(embedded imitation), ArangoDB. ``mongoquery.py`` compiles filters to MongoDB
query documents for both MongoDB-API stores."""
