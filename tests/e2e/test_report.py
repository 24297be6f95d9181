"""storebench report / compare / export as a user meets them, and the HTML
page in a real browser (Debian's headless Chromium) behind a proxy that
counts every connection the page makes: it must make none."""

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

CLI = [sys.executable, "-m", "storebench"]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]


def sb(*args, timeout=300, env=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Real runs: both embedded stores, clients 1 and 2, two repeats."""
    d = tmp_path_factory.mktemp("results")
    r = sb(
        "run",
        "crud",
        "--set",
        "n=1000",
        "--set",
        "ops=100",
        "--set",
        "grid.clients=[1,2]",
        "--set",
        "repeats=2",
        "--results",
        str(d),
    )
    assert r.returncode == 0, r.stderr
    return d


@pytest.fixture(scope="module")
def report(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    r = sb("report", str(results), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(out / "report.md"), str(out / "report.html")]
    return out


CHARTS = (
    "crud-recall-qps-find_by_vector",
    "crud-percentiles",
    "crud-concurrency",
    "crud-timeline",
    "footprint",
)
VIEWS = (
    "crud-crud_latency",
    "crud-crud_rates",
    "crud-tasks",
    "crud-percentiles",
    "crud-spread",
)


def test_report_writes_markdown_plots_and_one_html_page(report):
    md = (report / "report.md").read_text()
    assert "| m | ef_construct | ef | clients | Recall@10 | find by vector |" in md
    assert "find by vector QPS" in md and "create DPS" in md
    assert "min / median / max over runs of the same configuration" in md
    for chart in CHARTS:
        png, svg = report / "plots" / f"{chart}.png", report / "plots" / f"{chart}.svg"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert svg.read_text().lstrip().startswith("<svg")
        assert f"(plots/{chart}.png)" in md
    page = (report / "report.html").read_text()
    assert not re.search(r"""<(script|link|iframe|object|embed)\b""", page)


# --- the browser ---------------------------------------------------------------------


def chromium() -> str:
    for c in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if c and os.access(c, os.X_OK):
            return c
    if os.environ.get("STOREBENCH_REQUIRE_BROWSER"):
        pytest.fail("headless Chromium is required (apt-get install chromium)")
    pytest.skip("no chromium on this machine (apt-get install chromium)")


class CountingProxy:
    """A proxy on 127.0.0.1 that records each connection's first line and
    answers nothing: the browser is pointed at it, so any request the page
    makes, for any host, lands here."""

    def __init__(self):
        self.seen: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    first = conn.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
                except OSError:
                    first = "?"
                if not self._stop:
                    self.seen.append(first)
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    def close(self):
        self._stop = True
        self.sock.close()


# Chromium's own services (component updater, network time, account sign-in,
# their download mirrors) are contacted by Debian's build whatever the flags,
# more or fewer depending on how long the browser runs: that is the browser's
# traffic, not the page's, and all of it goes to Google's domains. What the
# page itself requests is read from the DevTools protocol.
BROWSER_SERVICE_DOMAINS = (
    "google.com",
    "googleapis.com",
    "gvt1.com",
    "gvt2.com",
    "gstatic.com",
    "googleusercontent.com",
)
QUIETER = [  # fewer of those background requests (not needed for correctness)
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,Translate,MediaRouter",
]


def proxy_host(first_line: str) -> str:
    """The host a proxied request goes to: CONNECT host:port or GET http://host/..."""
    parts = first_line.split(" ")
    target = parts[1] if len(parts) > 1 else ""
    if "://" in target:
        target = target.split("://", 1)[1].split("/", 1)[0]
    return target.rsplit(":", 1)[0].lower()


def page_traffic(seen: list[str]) -> list[str]:
    def browser_own(host: str) -> bool:
        return any(host == d or host.endswith("." + d) for d in BROWSER_SERVICE_DOMAINS)

    return [s for s in seen if not browser_own(proxy_host(s))]


class DevTools:
    """Chromium driven over --remote-debugging-pipe (fds 3 and 4, JSON
    messages ending in NUL): no port, no websocket library."""

    def __init__(self, exe: str, args: list[str], env: dict[str, str], log: Path):
        self.cmd_r, self.cmd_w = os.pipe()
        self.evt_r, self.evt_w = os.pipe()
        a, b = self.cmd_r, self.evt_w
        # the child must see the pipes as fds 3 and 4: bash does the renumbering
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{a} 4>&{b} {a}<&- {b}>&-', exe, *args],
            pass_fds=(a, b),
            stdout=subprocess.DEVNULL,
            stderr=open(log, "wb"),  # noqa: SIM115  (a file: a full pipe would stall the browser)
            env=env,
        )
        self.log = log
        os.close(self.cmd_r)
        os.close(self.evt_w)
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict | None:
        import select
        import time

        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.evt_r], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.evt_r, 1 << 20)
            if not chunk:
                raise RuntimeError("browser closed the pipe: " + self.log.read_text()[-2000:])
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(
        self, method: str, params: dict | None = None, session: str | None = None, timeout=120
    ):
        import time

        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m is None:
                raise TimeoutError(method)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method: str, timeout=120) -> dict:
        import time

        deadline = time.monotonic() + timeout
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read(deadline)
            if m is None:
                raise TimeoutError(method)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def drain(self, seconds: float) -> None:
        import time

        deadline = time.monotonic() + seconds
        while (m := self._read(deadline)) is not None:
            self.events.append(m)

    def close(self):
        with contextlib.suppress(Exception):
            self.call("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.cmd_w)
        os.close(self.evt_r)


class Loaded:
    def __init__(self, dom, requests, console, charts, screenshot):
        self.dom = dom
        self.requests = requests  # URLs the page asked for (Network domain)
        self.console = console  # console and CSP messages
        self.charts = charts  # [name, rendered width, height] per chart
        self.screenshot = screenshot


@pytest.fixture
def browser(tmp_path):
    """load(page) opens ``page`` in headless Chromium behind the counting
    proxy and returns its DOM, its requests and a screenshot."""
    exe = chromium()
    proxy = CountingProxy()
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    n = [0]

    def load(page: Path, width=1280, height=2400) -> Loaded:
        import base64

        n[0] += 1
        args = [
            *CHROMIUM_FLAGS,
            *QUIETER,
            f"--user-data-dir={tmp_path / f'profile-{n[0]}'}",
            f"--proxy-server=http://127.0.0.1:{proxy.port}",
            "--proxy-bypass-list=<-loopback>",  # even loopback goes through the proxy
            "--remote-debugging-pipe",
            "about:blank",
        ]
        dt = DevTools(exe, args, env, tmp_path / f"chromium-{n[0]}.log")
        try:
            target = dt.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            s = dt.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Network", "Page", "Log", "Runtime"):
                dt.call(f"{domain}.enable", session=s)
            dt.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=s,
            )
            dt.call("Page.navigate", {"url": page.as_uri()}, session=s)
            dt.wait_for("Page.loadEventFired")
            dt.drain(1.0)  # anything the page would fetch late
            # the details are folded (<details>, no script): a reader opens them
            dt.call(
                "Runtime.evaluate",
                {"expression": "document.querySelectorAll('details').forEach(d => d.open = true)"},
                session=s,
            )
            dom = dt.call(
                "Runtime.evaluate",
                {"expression": "document.documentElement.outerHTML", "returnByValue": True},
                session=s,
            )["result"]["value"]
            charts = dt.call(
                "Runtime.evaluate",
                {
                    "expression": "JSON.stringify([...document.querySelectorAll("
                    "'figure[data-chart] svg')].map(e => [e.closest('figure').dataset.chart,"
                    " e.getBoundingClientRect().width, e.getBoundingClientRect().height]))",
                    "returnByValue": True,
                },
                session=s,
            )["result"]["value"]
            png = base64.b64decode(
                dt.call("Page.captureScreenshot", {"format": "png"}, session=s)["data"]
            )
            dt.drain(0.2)
        finally:
            dt.close()
        requests = [
            e["params"]["request"]["url"]
            for e in dt.events
            if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == s
        ]
        console = [
            e["params"]["entry"]["text"]
            for e in dt.events
            if e.get("method") == "Log.entryAdded" and e.get("sessionId") == s
        ]
        shot = tmp_path / f"shot-{n[0]}.png"
        shot.write_bytes(png)
        return Loaded(dom, requests, console, json.loads(charts), shot)

    load.proxy = proxy  # type: ignore[attr-defined]
    yield load
    proxy.close()


def test_the_checks_see_a_page_that_fetches(browser, tmp_path):
    """Control: the same set-up reports a page with one remote image, both
    in the page's own requests and at the proxy."""
    page = tmp_path / "leaky.html"
    page.write_text('<!DOCTYPE html><p>x</p><img src="http://storebench.example/pixel.png">')
    loaded = browser(page)
    assert "http://storebench.example/pixel.png" in loaded.requests
    assert any("storebench.example" in s for s in page_traffic(browser.proxy.seen)), (
        browser.proxy.seen
    )


def test_html_report_in_headless_chromium_has_its_charts_and_tables_and_fetches_nothing(
    browser, report
):
    page = report / "report.html"
    loaded = browser(page)
    dom = loaded.dom
    assert "<title>storebench report</title>" in dom
    for chart in CHARTS:
        m = re.search(rf'<figure data-chart="{re.escape(chart)}"><svg\b(.*?)</svg>', dom, re.S)
        assert m, chart
        assert m.group(1).count("<path") > 10  # drawn, not an empty frame
    sizes = {name: (w, h) for name, w, h in loaded.charts}
    assert set(sizes) == set(CHARTS)
    assert all(w > 300 and h > 200 for w, h in sizes.values()), sizes
    for view in VIEWS:
        assert f'<table class="data" data-view="{view}">' in dom, view
    # 100 operations a task: each ends within one interval, no steadiness to tabulate
    assert "task(s) of one interval left out" in dom
    latency = dom.split('data-view="crud-crud_latency"', 1)[1].split("</table>", 1)[0]
    latency = latency.replace("<wbr>", "")  # where a column name may wrap
    for col in ("m", "ef_construct", "ef", "Recall@10", "find by vector", "find by condition"):
        assert f">{col}</th>" in latency
    assert "<caption>memory</caption>" in dom and "<caption>sqlite</caption>" in dom
    assert 'id="runs"' in dom and "engine version" in dom and "SQLite 3." in dom
    # the answer first: the summary (after any warnings) before the folded details
    main = dom.split("<main>", 1)[1]
    first = re.search(r'<section id="([^"]+)"', main).group(1)
    assert first in ("warnings", "summary-crud"), first
    assert main.index('id="summary-crud"') < main.index('<details class="fold" id="wl-crud"')
    # what tells the settings apart is on the first screen: the recall/QPS front
    front = main.index('<figure data-chart="crud-recall-qps-find_by_vector">')
    assert main.index('id="summary-crud"') < front < main.index("<details")
    assert re.search(r'<p class="lead">(memory|sqlite) leads by ops/s of find_by_vector: ', dom)
    assert "Conditions: " in dom and "bytes/vector" in dom

    from matplotlib.image import imread

    img = imread(loaded.screenshot)
    assert img.shape[:2] == (2400, 1280)
    assert img[..., :3].std() > 0.05  # a page, not a blank

    # nothing leaves the page: it asks only for itself, trips no CSP rule,
    # and the proxy sees nothing but the browser's own services
    assert loaded.requests == [page.as_uri()], loaded.requests
    assert not [c for c in loaded.console if "Content Security Policy" in c], loaded.console
    assert page_traffic(browser.proxy.seen) == [], browser.proxy.seen


# --- compare and export ----------------------------------------------------------


def test_compare_two_stores_metric_by_metric(results):
    args = ("compare", str(results), str(results), "--a", "store=memory", "--b", "store=sqlite")
    r = sb(*args, env=os.environ | {"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "A and B differ in store: memory → sqlite" in r.stdout
    # the summary: a row per pair (clients 1 and 2) of its headline task's
    # throughput, p95 and recall, one screen at most 80 wide
    assert "summary: 2 pairs" in r.stdout and "clients" in r.stdout
    assert "find_by_vector" in r.stdout and "recall@10" in r.stdout
    assert " p50 " not in r.stdout and "at least 5%" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert len(r.stdout.splitlines()) <= 40 and "-v: every task" in r.stdout
    assert "recall@10" in r.stdout and not re.search(r"recall@10 .*\?", r.stdout)
    full = sb("-v", *args, env=os.environ | {"COLUMNS": "160"}).stdout
    assert " p50 " in full and "(repeats)" in full
    assert "clients=1" in full and "clients=2" in full and "read" in full
    r = sb(
        "compare",
        str(results),
        str(results),
        "--a",
        "store=memory",
        "--b",
        "store=sqlite",
        "--json",
    )
    comp = json.loads(r.stdout)
    assert comp["differ"] == {"store.engine": ["memory", "sqlite"]}
    metrics = {row["metric"] for row in comp["rows"]}
    scores = {
        "recall@10",
        "precision@10",
        "recall@10 (ann-benchmarks)",
        "recall@10 (VectorDBBench)",
    }
    assert metrics == {"ops/s", "p50", "p95", "p99"} | scores
    assert {row["verdict"] for row in comp["rows"]} <= {"better", "worse", "noise", "same"}


def test_compare_fail_worse_exits_1_when_b_regresses(results):
    # sqlite's exact search scans rows in Python: far slower than memory's numpy scan
    r = sb(
        "compare",
        str(results),
        str(results),
        "--a",
        "store=memory",
        "--b",
        "store=sqlite",
        "--fail-worse",
    )
    assert r.returncode == 1, r.stdout


def test_export_csv_and_parquet(results, tmp_path):
    import pandas as pd

    r = sb("export", str(results), "--format", "csv", "--out", str(tmp_path / "r.csv"))
    assert r.returncode == 0, r.stderr
    r = sb("export", str(results), "--out", str(tmp_path / "r.parquet"))
    assert r.returncode == 0, r.stderr
    a, b = pd.read_csv(tmp_path / "r.csv"), pd.read_parquet(tmp_path / "r.parquet")
    assert len(a) == len(b) == 8 * 6  # 2 stores x 2 clients x 2 repeats, 6 tasks each
    assert set(a["task"]) == {
        "create",
        "read",
        "update",
        "delete",
        "find_by_condition",
        "find_by_vector",
    }


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "nothing.jsonl", "--out", "OUT"], "nothing.jsonl: no such file or directory"),
        (["export", "RESULTS", "--out", "OUT/x.txt"], "--out: give --format csv|parquet"),
        (["compare", "RESULTS", "RESULTS", "--a", "store=nosuch"], "no runs match"),
        (["compare", "RESULTS", "RESULTS", "--b", "store"], "expected KEY=VALUE"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(results, tmp_path, args, message):
    out = tmp_path / "out"
    args = [a.replace("RESULTS", str(results)).replace("OUT", str(out)) for a in args]
    r = sb(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storebench: error: "), lines
    assert message in lines[0]
    assert not out.exists()


def test_proxy_hosts_are_read_from_both_request_forms():
    assert proxy_host("CONNECT update.googleapis.com:443 HTTP/1.1") == "update.googleapis.com"
    assert proxy_host("GET http://storebench.example/pixel.png HTTP/1.1") == "storebench.example"
    assert page_traffic(["GET http://evil-google.com/x HTTP/1.1"]) != []
    assert page_traffic(["CONNECT accounts.google.com:443 HTTP/1.1"]) == []
