"""crud plans its deletes from n, warm-up and clients: every delete it
issues is one the count check after it expects, for any valid combination
(64 clients on 1,000 documents, n=5, ...), so a harness plan is never
blamed on the store."""

from hypothesis import given, settings
from hypothesis import strategies as st

import storebench


@settings(max_examples=6, deadline=None)
@given(
    n=st.integers(1, 300),
    clients=st.integers(1, 70),
    warmup=st.integers(0, 12),
    ops=st.integers(1, 400),
)
def test_every_combination_passes_the_count_checks(tmp_path_factory, n, clients, warmup, ops):
    values = {
        "n": n,
        "clients": clients,
        "warmup": warmup,
        "ops": ops,
        "dim": 8,
        "grid": {},
    }
    (rec,) = storebench.run(
        "crud", stores=["memory"], set=values, results_dir=tmp_path_factory.mktemp("r")
    )
    assert rec["status"] == "ok", rec.get("error")
    deletes = [t for t in rec["tasks"] if t["name"] == "delete"]
    if n >= 2:
        assert deletes and deletes[0]["ops"] >= 1


def test_sixty_four_clients_on_a_thousand_documents(tmp_path):
    recs = storebench.run(
        "crud",
        stores=["memory"],
        set={"n": 1000, "clients": 64, "dim": 8, "grid": {}},
        results_dir=tmp_path,
    )
    assert recs[0]["status"] == "ok", recs[0].get("error")
