"""Reference stores: ``memory`` (numpy columns, exact search: the answer
every other store is checked against) and ``null`` (does nothing: the
harness's own ceiling)."""
