"""Store URLs and options, checked before a run (``stores/config.py``): every
store's accepted URL forms pass, malformed ones are one-line user errors,
options are typed per store, and nothing is connected to."""

import contextlib
import pickle
import re
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storebench.common import redaction
from storebench.errors import UserError
from storebench.plan.scenario import Scenario
from storebench.stores.base import StoreSpec, engine_names, store_class
from storebench.stores.config import SpecError

SECRET = "Qz8f3c1e9aSecretWy"

# Each store's accepted URL forms ({d}: an existing directory). Stores not
# here take no URL.
ACCEPTED = {
    "weaviate": ["http://127.0.0.1:8080", "http://h:8080?grpc_port=50051"],
    "mongodb": ["mongodb://127.0.0.1:27017", f"mongodb://u:{SECRET}@h:27017/bench"],
    "sqlite": ["{d}/x.db", "sqlite://{d}/x.db", "x.db"],
    "sqlite-vec": ["{d}/x.db", "sqlite-vec://{d}/x.db"],
    "duckdb": ["{d}/duck", "duckdb://{d}/duck"],
    "chroma": ["{d}/chroma"],
    "lancedb": ["{d}/lance"],
    "qdrant-edge": ["{d}/qdrant", "{d}"],
    "kuzu": ["{d}/db.kuzu"],
    "mongita": ["{d}/mongita"],
    "agdb-embedded": ["{d}/agdb", "agdb-embedded://{d}/agdb"],
    "milvus": [
        "http://127.0.0.1:19530",
        f"https://root:{SECRET}@milvus.example:443/mydb",
        "tcp://h:19530",
    ],
    "milvus-lite": [
        "{d}/bench.db",
        "http://127.0.0.1:19530",
        f"https://root:{SECRET}@milvus.example:443/mydb",
        "tcp://h:19530",
    ],
    "redis": [
        "redis://127.0.0.1:6379/0",
        f"redis://:{SECRET}@127.0.0.1:6379/99",  # a database the server may lack: found on open
        f"redis://default:{SECRET}@h/3",
        f"redis://h:6379/0?password={SECRET}&client_name=x",
        "rediss://h:6380",
        "redis://[::1]:6379/",
        "unix:///tmp/redis.sock?db=2",
    ],
    "falkordb": ["redis://h:6379/0", f"redis://:{SECRET}@h:1/0"],
    "pgvector": [
        f"postgresql://me:{SECRET}@db:5432/bench",
        "postgres://me@db/bench?sslmode=disable",
        "postgresql:///bench",  # a Unix socket
        "postgresql://h1:5432,h2:5433/bench",
        f"host=h port=5432 user=me password={SECRET} dbname=bench",
        "host=h port=5432,5433 dbname='my db'",
    ],
    "elasticsearch": [f"http://elastic:{SECRET}@es:9200", "https://es"],
    "opensearch": [f"https://admin:{SECRET}@os:9200", "http://[::1]:9200"],
    "agdb": [f"http://me:{SECRET}@graph:3000", "http://me:pw@graph:3000/api"],
    "mariadb": [f"mysql://me:{SECRET}@db:3306/bench", "mariadb://me@db/bench"],
    "arangodb": [f"http://root:{SECRET}@db:8529/bench", "https://db", "http://db:8529/"],
}
# Malformed URLs, with a word the one-line message must hold.
REFUSED = {
    "weaviate": [("https://h:8080", "scheme 'https'"), ("http://h:notaport", "port 'notaport'")],
    "mongodb": [("mongodb://h/a.b", "a.b"), ("http://h:27017", "scheme 'http'")],
    "sqlite": [("/no/such/dir/x.db", "does not exist"), ("redis://h", "not a path"), ("", "empty")],
    "qdrant-edge": [("/no/such/dir/q", "does not exist")],
    "agdb-embedded": [("/no/such/dir/agdb", "does not exist")],
    "milvus": [("/tmp/m.db", "expected http(s)://"), ("grpc://h:1", "scheme 'grpc'")],
    "milvus-lite": [("/no/such/dir/m.db", "does not exist"), ("grpc://h:1", "scheme 'grpc'")],
    "redis": [
        (f"redis://:{SECRET}@127.0.0.1:notaport/0", "port 'notaport'"),
        ("redis://h:70000/0", "port '70000'"),
        ("redis://h:0/0", "port '0'"),
        ("http://127.0.0.1:6379", "scheme 'http'"),
        ("redis://h:6379/abc", "database number"),
        ("redis://h:6379/0?db=x", "Invalid value for 'db'"),
        ("redis://:6379/0", "no host"),
        ("127.0.0.1:6379", "not a URL"),
        ("redis://[::1:6379/0", "IPv6"),
        ("unix://", "no socket path"),
    ],
    "falkordb": [("redis://h:x/0", "port 'x'")],
    "pgvector": [
        ("host=h port=abc", "port 'abc'"),
        ("postgresql://h:99999/db", "port '99999'"),
        ("bogus=1", 'invalid connection option "bogus"'),
        ("postgresql://h/db?bogus=1", "invalid URI query parameter"),
        (f"host=h password='{SECRET}", "unterminated quoted string"),
        ("mysql://h/db", "scheme 'mysql'"),
    ],
    "elasticsearch": [(f"es://u:{SECRET}@host:9200", "scheme 'es'"), ("http://", "no host")],
    "agdb": [
        ("http://graph:3000", "no user"),
        ("https://me:pw@graph", "scheme 'https'"),
    ],
    "mariadb": [
        (f"mysql://me:{SECRET}@db:3306", "no database"),
        ("mysql://me@db/a/b", "one database name"),
        ("postgresql://x@127.0.0.1/db", "scheme 'postgresql'"),
    ],
    "arangodb": [
        ("tcp://host:8529/db", "scheme 'tcp'"),
        ("http:///db", "no host"),
        ("http://h:8529/a/b", "database name"),
    ],
    "memory": [("redis://127.0.0.1:6379/0", "memory takes no url")],
    "null": [("/tmp/x", "null takes no url")],
    "hnswlib": [("/tmp/x", "hnswlib takes no url")],
}


@contextlib.contextmanager
def remembered_kept():
    """Checks remember the secrets of the URLs they see: random ones would
    then be removed from other tests' text. Restored afterwards."""
    saved = set(redaction._remembered)
    try:
        yield
    finally:
        with redaction._lock:
            redaction._remembered.clear()
            redaction._remembered.update(saved)


def one_line(exc: UserError) -> str:
    text = str(exc)
    assert "\n" not in text and "\r" not in text, text
    assert SECRET not in text, text
    return text


def test_every_store_has_its_forms_here():
    assert set(ACCEPTED) | {e for e in engine_names() if store_class(e).url_form is None} == set(
        engine_names()
    )


@pytest.mark.parametrize("engine", engine_names())
def test_accepted_url_forms_pass_and_malformed_ones_are_one_line(engine, tmp_path):
    cls = store_class(engine)
    for url in ACCEPTED.get(engine, []):
        cls.check_url(url.format(d=tmp_path))
    cls.check_url(None) if not (cls.url_form and cls.url_form.required) else None
    for url, word in REFUSED.get(engine, []):
        with pytest.raises(SpecError) as err:
            cls.check_url(url)
        text = one_line(err.value)
        assert word in text and err.value.key == ("url",), text
        assert f"{engine} url" in text or "takes no url" in text


def test_a_store_that_runs_only_by_url_needs_one():
    with pytest.raises(SpecError, match=r"arangodb runs only by URL here") as err:
        store_class("arangodb").check_url(None)
    assert err.value.key == ()


@pytest.mark.parametrize(
    "engine, options, message",
    [
        (
            "sqlite",
            {"bogus_option": 1},
            "unknown option parameter 'bogus_option' for store sqlite (known: mode, synchronous)",
        ),
        ("memory", {"x": 1}, "store memory takes no options (got 'x')"),
        ("hnswlib", {"threads": 2}, "store hnswlib takes no options"),
        ("sqlite", {"mode": "ram"}, "option mode of sqlite: Input should be 'file' or 'memory'"),
        ("elasticsearch", {"shards": True}, "option shards of elasticsearch: expected a number"),
        ("arangodb", {"async": "yes"}, "option async of arangodb: Input should be a valid boolean"),
        ("qdrant-edge", {"indexing_threshold_kb": 0}, "greater than 0 (got 0)"),
        ("pgvector", {"synchronous_commit": "sometimes"}, "option synchronous_commit of pgvector"),
        ("pgvector", {"tuning": "pgtune"}, "option tuning of pgvector"),
        ("pgvector", {"settings": {"work_mem": "4 MiB"}}, "not a PostgreSQL memory size"),
        ("mariadb", {"settings": {"innodb_buffer_pool_size": "6 gigs"}}, "is not a size"),
        ("mariadb", {"table_engine": "x; DROP"}, "option table_engine of mariadb"),
    ],
)
def test_bad_options_are_one_line_naming_option_and_store(engine, options, message):
    with pytest.raises(SpecError) as err:
        store_class(engine).check_options(options)
    assert message in one_line(err.value)
    assert err.value.key[0] == "options"


@pytest.mark.parametrize(
    "engine, url, options, message",
    [
        ("redis", "redis://h:1/0", {"persistence": "aof"}, "option persistence of redis"),
        ("mariadb", "mysql://u@h/d", {"settings": {"a": 1}}, "managed server"),
        ("mariadb", "mysql://u@h/d", {"tuning": "defaults"}, "option tuning of mariadb"),
        ("pgvector", "postgresql://u@h/d", {"tuning": "initdb"}, "option tuning of pgvector"),
        ("pgvector", "postgresql://u@h/d", {"settings": {"a": 1}}, "option settings of pgvector"),
        ("agdb", "http://u:p@h:3000", {"log_level": "info"}, "option log_level of agdb"),
        ("elasticsearch", "http://h:9200", {"heap": "2g"}, "option heap of elasticsearch"),
        ("opensearch", "http://h:9200,http://g:9200", {"nodes": 2}, "option nodes of opensearch"),
        ("elasticsearch", "http://h:9200", {"node_cpus": 0.5}, "option node_cpus of"),
        (
            "sqlite",
            "/tmp/x.db",
            {"mode": "memory"},
            "in-memory database (mode: memory) takes no url",
        ),
        ("kuzu", "/tmp/x.kuzu", {"mode": "memory"}, "in-memory"),
    ],
)
def test_options_for_what_a_url_excludes_are_refused_with_one(engine, url, options, message):
    cls = store_class(engine)
    cls.check_spec(None, options)  # fine without a url
    with pytest.raises(SpecError, match=re.escape(message)):
        cls.check_spec(url, options)


def test_a_cluster_is_asked_for_by_its_topology_and_checked_before_it_starts():
    cls = store_class("opensearch")
    assert cls.check_options({}).topology() == {"nodes": 1, "cpus": None, "memory_bytes": None}
    # a node per copy unless nodes says more; quota and memory per node
    got = cls.check_options({"replicas": 4, "node_cpus": 0.25, "node_memory": "1g"})
    assert got.topology() == {"nodes": 4, "cpus": 0.25, "memory_bytes": 1 << 30}
    assert cls.check_options({"replicas": 2, "nodes": 3}).topology()["nodes"] == 3
    for bad, message in [
        ({"replicas": 3, "nodes": 2}, "replicas=3 puts each copy on a node of its own"),
        ({"node_memory": "lots"}, "not a size"),
        ({"node_cpus": 0}, "greater than 0"),
        ({"replicas": 0}, "greater than 0"),
    ]:
        with pytest.raises(SpecError, match=message):
            cls.check_options(bad)
    # by URL: every node of a cluster, each URL checked
    assert len(cls.check_url("http://a:9200,https://b:9201")) == 2
    with pytest.raises(SpecError, match="port 'x' is not a number"):
        cls.check_url("http://a:9200,http://b:x")
    # the plan's memory estimate counts every managed node, nothing by URL
    from storebench.stores.base import StoreSpec
    from storebench.stores.params import HnswIndex

    one = cls.memory_use(StoreSpec("opensearch"), HnswIndex(), 8, 0)[1]
    four = cls.memory_use(StoreSpec("opensearch", options={"replicas": 4}), HnswIndex(), 8, 0)[1]
    assert four == 4 * one
    by_url = StoreSpec("opensearch", "http://a:9200", {"replicas": 4})
    assert cls.memory_use(by_url, HnswIndex(), 8, 0) == (0, 0)


def test_a_cluster_counts_a_copy_of_the_data_per_replica_and_its_fixed_part_per_node():
    from storebench.stores.base import StoreSpec
    from storebench.stores.params import HnswIndex

    pytest.importorskip("weaviate")
    wv = store_class("weaviate")
    per_doc, fixed = wv.memory_use(StoreSpec("weaviate"), HnswIndex(), 8, 0)
    spec = StoreSpec("weaviate", options={"replicas": 2, "nodes": 3})
    assert wv.memory_use(spec, HnswIndex(), 8, 0) == (2 * per_doc, 3 * fixed)


def test_options_are_typed_and_what_the_store_uses():
    o = store_class("pgvector").check_options({"synchronous_commit": False})
    assert o.synchronous_commit == "off"  # YAML's bare off
    assert store_class("sqlite").check_options({"synchronous": "off"}).synchronous == "OFF"
    assert store_class("arangodb").check_options({"async": True}).async_ is True
    assert store_class("elasticsearch").check_options({}).request_timeout == 120.0


def test_the_plan_checks_once_and_the_spec_carries_the_typed_options(tmp_path, monkeypatch):
    p = tmp_path / "s.yaml"
    p.write_text(
        "name: s\nworkload: crud\nstores:\n"
        "  - {engine: sqlite, options: {mode: memory, synchronous: full}}\n"
        "params: {n: 100, ops: 5}\n"
    )
    runs = Scenario.load(str(p)).plan()
    spec = runs[0].spec
    assert spec.checked_options.synchronous == "FULL"
    assert spec.describe()["options"] == {"mode": "memory", "synchronous": "full"}  # as given
    # the store takes them as they are: no second validation
    cls = store_class("sqlite")
    monkeypatch.setattr(cls, "check_options", classmethod(lambda *a: pytest.fail("again")))
    store = spec.open()
    try:
        assert store.options is spec.checked_options
        assert store.connection().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        store.close()
    # to a client process with the spec; checked anew once the options change
    assert pickle.loads(pickle.dumps(spec)).checked_options == spec.checked_options
    assert spec.with_(url="x").checked_options is spec.checked_options
    assert spec.with_(options={}).checked_options is None


def test_a_store_opened_directly_checks_its_spec():
    with pytest.raises(UserError, match="store memory takes no options"):
        StoreSpec("memory", options={"x": 1}).open()
    with pytest.raises(UserError, match="memory takes no url"):
        StoreSpec("memory", "redis://h:1/0").open()
    store = StoreSpec("sqlite", options={"mode": "memory"}).open()
    try:
        assert store.options.mode == "memory" and store.options.synchronous == "NORMAL"
    finally:
        store.close()


def test_a_secret_in_a_bad_url_stays_out_of_the_message():
    for engine, url in (
        ("redis", f"redis://:{quote(SECRET)}@h:port/0"),
        ("pgvector", f"host=h password={SECRET} port=x"),
        ("mariadb", f"mysql://me:{SECRET}@db:3306"),
    ):
        with remembered_kept(), pytest.raises(SpecError) as err:
            store_class(engine).check_url(url)
        assert "***" in one_line(err.value)


# --- any string ------------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_piece = st.one_of(
    _text,
    st.sampled_from(["", ":", "@", "/", "//", "?", "#", "[", "]", "%", "=", " ", "::1", "0", "99"]),
)


@st.composite
def _urls(draw, engine: str) -> str:
    form = store_class(engine).url_form
    schemes = [*(form.schemes if form else ()), engine, "http", "x"]
    kind = draw(st.sampled_from(["text", "url", "keywords", "path"]))
    if kind == "text":
        return draw(_text)
    if kind == "keywords":
        words = draw(st.lists(st.tuples(st.sampled_from(["host", "port", "dbname", "x"]), _piece)))
        return " ".join(f"{k}={v}" for k, v in words)
    if kind == "path":
        return draw(st.sampled_from(["/tmp/", "/no/", "", "./", "~/", f"{engine}://"])) + draw(
            _text
        )
    scheme = draw(st.sampled_from(schemes))
    user = draw(st.sampled_from(["", "u@", "u:p@", ":p@", "u:p@:@"]))
    host = draw(st.one_of(st.sampled_from(["h", "127.0.0.1", "[::1]", "[::1", ""]), _text))
    port = draw(
        st.one_of(
            st.just(""), st.integers(-5, 70000).map(lambda n: f":{n}"), _piece.map(":".__add__)
        )
    )
    rest = draw(st.lists(_piece, max_size=4))
    return f"{scheme}://{user}{host}{port}{''.join(rest)}"


@settings(max_examples=400, deadline=None)
@given(data=st.data(), engine=st.sampled_from(engine_names()))
def test_any_url_is_accepted_or_refused_in_one_line(data, engine):
    url = data.draw(_urls(engine), label="url")
    with remembered_kept():
        try:
            store_class(engine).check_url(url)
        except UserError as exc:  # any other exception fails the test
            text = str(exc)
            assert "\n" not in text and "\r" not in text, text
            assert text.startswith("store: ")


@pytest.mark.parametrize("bad", [".inf", "-.inf", ".nan"])
def test_store_options_refuse_numbers_that_are_not_finite(bad):
    from storebench.plan.scenario import Scenario

    with pytest.raises(UserError, match="finite number"):
        Scenario.load(
            "search",
            [f"stores=[{{engine: elasticsearch, options: {{request_timeout: {bad}}}}}]"],
        )
