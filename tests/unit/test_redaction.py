"""redaction.redact: every secret form a store accepts, in any text."""

import json
import logging
import re
import secrets
import socket
from pathlib import Path
from unittest import mock
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storebench.common import redaction
from storebench.common.redaction import MASK, is_secret_key, redact, redact_obj, remember
from storebench.plan.scenario import Scenario
from storebench.results import files as results
from storebench.stores.base import StoreSpec

SPECIALS = "@:/&' \"?#%=+\\;,"


def token() -> str:
    return "Tk" + secrets.token_hex(8)


def leaks(secret_parts: list[str], text: str) -> list[str]:
    return [p for p in secret_parts if p in text]


# --- the forms, with nothing remembered -------------------------------------------


@pytest.mark.parametrize(
    "template, kept",
    [
        ("postgresql://bench:{enc}@db:5432/x", "postgresql://bench:***@db:5432/x"),
        ("redis://:{enc}@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("mysql://u:{raw_at}@h:3306/d", "mysql://u:***@h:3306/d"),  # raw @ and :
        ("http://u:{raw_slash}@h:9200", "http://u:***@h:9200"),  # raw /: to the last @
        ("redis://h:6379/0?password={enc}", "redis://h:6379/0?password=***"),
        ("redis://h:6379/0?db=1&PASSWORD={enc}&x=2", "redis://h:6379/0?db=1&PASSWORD=***&x=2"),
        ("http://h/?token={enc}", "http://h/?token=***"),
        ("http://h/?api_key={enc}#top", "http://h/?api_key=***#top"),
        ("http://h/?apikey={enc}", "http://h/?apikey=***"),
        ("http://h/?secret={enc}", "http://h/?secret=***"),
        ("http://h/?auth={enc}", "http://h/?auth=***"),
        ("http://h/?pass={enc}&pwd={enc}", "http://h/?pass=***&pwd=***"),
        ("http://h/?Api-Key={enc}", "http://h/?Api-Key=***"),
        (
            "host=h port=5 user=u password={word} dbname=d",
            "host=h port=5 user=u password=*** dbname=d",
        ),
        ("host=h password = {word} dbname=d", "host=h password = *** dbname=d"),
        ("host=h password='{libpq}' dbname=d", "host=h password=*** dbname=d"),
        ("sslpassword={word} host=h", "sslpassword=*** host=h"),
        ("connect(host='h', password='{py}', port=1)", "connect(host='h', password=***, port=1)"),
        ("{{'password': '{py}', 'host': 'h'}}", "{'password': ***, 'host': 'h'}"),
        ('{{"token": "{json}", "n": 1}}', '{"token": ***, "n": 1}'),
        ("Authorization: Basic {word}\nnext", "Authorization: Basic ***\nnext"),
    ],
)
def test_each_form_loses_its_secret_and_keeps_the_rest(template, kept):
    a, b = token(), token()
    secret = f"{a}{SPECIALS}{b}"
    text = template.format(
        enc=quote(secret, safe=""),
        raw_at=f"{a}@:{b}",
        raw_slash=f"{a}/@:{b}",
        word=f"{a}{b}",
        libpq=secret.replace("\\", "\\\\").replace("'", "\\'"),
        py=f"{a} @:/&\\' {b}",
        json=json.dumps(secret)[1:-1],
    )
    out = redact(text)
    assert out == kept
    assert not leaks([a, b], out)


def test_plain_text_urls_and_users_stay():
    for text in (
        "redis://127.0.0.1:6379/0",
        "http://admin@host:9200/x failed: mail me at a@b.c",
        "postgresql://bench@db/x?sslmode=require&application_name=sb",
        "host=h user=bench dbname=x passfile=/home/u/.pgpass",
        "ef=100 m=16 tokens=5",
        "authorization failed for bench",
    ):
        assert redact(text) == text
    assert redact(None) == ""


def test_placeholders_in_a_message_stay_readable():
    for text in (
        "expected redis://[:password@]host:port/db, got 'x'",
        "--store arangodb=http://user:pass@host:8529/dbname",
        "give host=h password=<password> or PGPASSWORD",
        "redis://:***@h:1/0?token=***",
    ):
        assert redact(text) == text


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "Password",
        "PASSWD",
        "pwd",
        "pass",
        "token",
        "api_key",
        "apikey",
        "api-key",
        "apiKey",
        "secret",
        "client_secret",
        "auth",
        "authToken",
        "access_token",
        "sslpassword",
        "PGPASSWORD",
        "MYSQL_PWD",
        "REDIS_PASSWORD",
        "MILVUS_TOKEN",
        "MILVUS_PASSWORD",
        "AGDB_PASSWORD",
        "STOREBENCH_ARANGODB_PASSWORD",
        "STOREBENCH_ELASTICSEARCH_PASSWORD",
        "STOREBENCH_OPENSEARCH_PASSWORD",
    ],
)
def test_secret_names(name):
    assert is_secret_key(name)


@pytest.mark.parametrize(
    "name",
    [
        "user",
        "username",
        "MILVUS_USER",
        "host",
        "passfile",
        "PGPASSFILE",
        "sslkey",
        "TOKENIZERS_PARALLELISM",
        "SSH_AUTH_SOCK",
        "ef",
        "key",
        "dbname",
    ],
)
def test_names_that_hold_no_secret(name):
    assert not is_secret_key(name)


def test_every_credential_variable_a_store_reads_is_a_secret_name():
    stores = Path(redaction.__file__).parents[1] / "stores"
    names = set()
    for f in stores.rglob("*.py"):
        src = f.read_text()
        names |= set(re.findall(r"os\.environ(?:\.get\()?\[?\(?f?\"([A-Za-z0-9_{}]+)\"", src))
    names = {n.replace("{env}", "ELASTICSEARCH") for n in names}
    assert {"REDIS_PASSWORD", "MILVUS_TOKEN", "MYSQL_PWD", "AGDB_PASSWORD"} <= names
    users = {n for n in names if n.endswith(("_USER", "_USERNAME"))}
    assert names - users, names
    for n in names - users:
        assert is_secret_key(n), n


# --- remembered values: the echo of a client, wherever it is -----------------------


def test_a_remembered_url_secret_goes_from_any_text_in_any_encoding():
    a, b = token(), token()
    secret = f"{a} @:/&'{b}"
    url = f"redis://127.0.0.1:1/0?password={quote_plus(secret)}"
    StoreSpec("redis", url)  # a spec remembers its URL's secrets
    for echo in (
        f'auth failed for "{secret}"',
        f"AUTH {quote(secret, safe='')} rejected",
        f"bad value {quote_plus(secret)}",
    ):
        assert not leaks([a, b], redact(echo)), echo


def test_a_libpq_quoted_secret_is_remembered_without_its_quotes_and_escapes():
    a, b = token(), token()
    remember(f"host=h user=u password='{a} \\' {b}' dbname=d")
    assert redact(f"role: {a} ' {b}!") == "role: ***!"


@pytest.mark.parametrize(
    "echo",
    [
        lambda v: f"user={v!r} failed",  # repr
        lambda v: f"user='{v.replace(chr(92), chr(92) * 2).replace(chr(39), chr(92) + chr(39))}'",
        lambda v: json.dumps({"user": v}),
        lambda v: json.dumps({"user": v}, ensure_ascii=False),
    ],
)
def test_an_escaped_echo_of_an_environment_secret_goes_too(monkeypatch, echo):
    a, b = token(), token()
    value = f"{a}'\\\"é {b}"
    monkeypatch.setenv("PGPASSWORD", value)
    assert not leaks([a, b], redact(echo(value)))


def test_a_secret_option_is_remembered_and_masked():
    a = token()
    spec = StoreSpec("memory", options={"api_token": a, "mode": "x"})
    assert spec.describe()["options"] == {"api_token": MASK, "mode": "x"}
    assert redact(f"echo {a}") == "echo ***"


def test_environment_secrets_go_from_any_text(monkeypatch):
    a, b = token(), token()
    monkeypatch.setenv("MILVUS_TOKEN", f"root:{a}")
    monkeypatch.setenv("STOREBENCH_OPENSEARCH_PASSWORD", b)
    monkeypatch.setenv("MILVUS_USER", "rooty")  # a user name is no secret
    out = redact(f"token root:{a} then {quote(b)} as rooty")
    assert not leaks([a, b], out) and "rooty" in out
    monkeypatch.setenv("MY_TOKEN", "abc")  # too short to look for everywhere
    assert redact("abcdef") == "abcdef"


def test_a_message_cut_inside_a_secret_loses_the_cut_start_too():
    a = token() + token()
    remember(f"redis://:{a}@h:1/0")
    cut = f"AuthenticationError: bad password {a}"[:-10]
    assert redact(cut).endswith("bad password ***")


def test_records_lose_secrets_in_every_field_and_key_but_histograms_stay():
    a = token()
    remember(f"postgresql://u:{a}@h/d")
    rec = {
        "run_id": "r",
        "store": {"url": f"postgresql://u:{a}@h/d"},
        "error": f"failed: {a}",
        "traceback": [f"line {a}"],
        "tasks": [{"errors": {f"OperationalError: {a}": 3}, "histogram": f"HISTF{a}"}],
        "cleanup_errors": (f"t: {a}",),
    }
    out = redact_obj(rec)
    text = json.dumps({k: v for k, v in out.items() if k != "tasks"}) + str(
        out["tasks"][0]["errors"]
    )
    assert a not in text
    assert out["tasks"][0]["histogram"] == f"HISTF{a}"  # data, not text
    assert rec["error"] == f"failed: {a}"  # a copy: the original stays


def test_results_are_redacted_when_written_and_when_read(tmp_path):
    a = token()
    remember(f"redis://:{a}@h:1/0")
    path = tmp_path / "r.jsonl"
    results.append(path, {"run_id": "1", "error": f"x {a}"})
    assert a not in path.read_text()
    # a file from before redaction: readers still see no secret
    with open(path, "a") as f:
        f.write(json.dumps({"run_id": "2", "store": {"url": f"redis://:{a}@h:1/0"}}) + "\n")
    assert a not in json.dumps(list(results.read(path)))


def test_log_lines_and_their_tracebacks_are_redacted(caplog):
    a = token()
    remember(f"redis://:{a}@h:1/0")
    log = logging.getLogger("storebench")
    with caplog.at_level(logging.INFO, logger="storebench"):
        try:
            raise RuntimeError(f"cannot reach redis://:{a}@h:1/0")
        except RuntimeError as exc:
            log.warning("could not drop %s: %s", "c", exc, exc_info=True)
    (rec,) = caplog.records
    assert a not in rec.getMessage() and a not in (rec.exc_text or "")
    assert "redis://:***@h:1/0" in rec.getMessage()


def test_the_run_key_holds_no_secret_and_does_not_change_with_it(tmp_path):
    def key(secret: str) -> str:
        url = f"redis://127.0.0.1:1/0?password={secret}"
        (run,) = Scenario.load("ingest", ["count=10", "grid={}"], [f"redis={url}"]).plan()
        assert secret not in json.dumps(run.spec.describe())
        return run.key

    assert key(token()) == key(token())


# --- properties ------------------------------------------------------------------

_secret_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24
)


@settings(max_examples=300, deadline=None)
@given(middle=_secret_text, form=st.sampled_from(["userinfo", "query", "libpq", "libpq_bare"]))
def test_no_secret_survives_in_any_form(middle, form):
    # distinctive ends: if either shows, part of the secret got through
    a, b = "Qz" + secrets.token_hex(6), "Wy" + secrets.token_hex(6)
    secret = f"{a}{middle}{b}"
    if form == "userinfo":
        text = f"cannot reach postgresql://user:{quote(secret, safe='')}@h:5432/db: refused"
    elif form == "query":
        text = f"bad redis://h:6379/0?db=0&password={quote_plus(secret)}&x=1 here"
    elif form == "libpq":
        esc = secret.replace("\\", "\\\\").replace("'", "\\'")
        text = f"at host=h user=u password='{esc}' dbname=d: refused"
    else:
        secret = f"{a}{''.join(c for c in middle if not c.isspace())}{b}"
        text = f"at host=h password={secret} dbname=d"
    out = redact(text)
    assert a not in out and b not in out
    assert out.count(MASK) >= 1


@settings(max_examples=200, deadline=None)
@given(middle=_secret_text, prefix=_secret_text, suffix=_secret_text)
def test_a_remembered_secret_goes_from_any_surrounding_text(middle, prefix, suffix):
    a, b = "Qz" + secrets.token_hex(6), "Wy" + secrets.token_hex(6)
    secret = f"{a}{middle}{b}"
    # each example's secret alone: hundreds remembered would make each redact slower
    with mock.patch.object(redaction, "_remembered", set()):
        remember(f"redis://:{quote(secret, safe='')}@h:1/0")
        out = redact(prefix + secret + suffix)
    assert a not in out and b not in out


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=80))
def test_redaction_is_idempotent(text):
    once = redact(text)
    assert redact(once) == once


def test_what_python_prints_itself_is_redacted(tmp_path):
    # an uncaught exception (main thread and another) and a warning, in a
    # process guarded as the CLI guards itself
    a = token()
    code = f"""
import threading, warnings
from storebench.common import redaction
redaction.guard_process()
redaction.remember("redis://:{a}@h:1/0")
warnings.warn("connecting with {a}")
t = threading.Thread(target=lambda: (_ for _ in ()).throw(OSError("thread saw {a}")))
t.start(); t.join()
raise RuntimeError("main saw {a}")
"""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "main saw ***" in r.stderr and "thread saw ***" in r.stderr
    assert "connecting with ***" in r.stderr
    assert a not in r.stderr + r.stdout


def test_storebench_errors_are_made_without_secrets():
    from storebench.errors import UserError

    a = token()
    err = UserError(f"cannot reach redis://:{a}@h:1/0", where=f"store redis?token={a}")
    assert a not in str(err) and a not in err.where
    assert str(err) == "store redis?token=***: cannot reach redis://:***@h:1/0"
    assert str(err).removeprefix(f"{err.where}: ") == "cannot reach redis://:***@h:1/0"


def test_a_store_opened_directly_fails_without_its_secret():
    # the Python API, no runner around it: the error itself is redacted
    from storebench.errors import UserError

    a = token()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        for url in (
            f"redis://127.0.0.1:{port}/0?password={a}",
            f"redis://default:{a}@127.0.0.1:{port}/0",
        ):
            with pytest.raises(UserError) as err:
                StoreSpec("redis", url).open()
            assert "cannot reach Redis" in str(err.value) and a not in str(err.value)


def test_a_spec_unpickled_in_a_client_process_remembers_its_secrets():
    import pickle
    import subprocess
    import sys

    a = token()
    spec = StoreSpec("redis", f"redis://h:1/0?password={a}")
    code = (
        "import pickle, sys\n"
        "from storebench.common.redaction import redact\n"
        "spec = pickle.loads(sys.stdin.buffer.read())\n"
        f"print(redact('client saw {a}'), spec.url == {spec.url!r})\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(spec), capture_output=True, timeout=120
    )
    assert r.stdout.decode().split() == ["client", "saw", "***", "True"], r.stderr
