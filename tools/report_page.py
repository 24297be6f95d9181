#!/usr/bin/env python3
"""How a report.html looks in a browser: its first screen as a PNG and its
page height, with the details folded (as it opens) and all opened.

Uses headless Chromium (``/usr/bin/chromium``). The page forbids scripts
(its Content-Security-Policy), so the height is read from a copy without
that policy and with one script that measures it.

    python tools/report_page.py REPORT.html [--shot first.png] [--width 1280] [--height 900]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MEASURE = """<script>
document.body.dataset.folded = document.documentElement.scrollHeight;
document.querySelectorAll('details').forEach(d => d.open = true);
document.body.dataset.opened = document.documentElement.scrollHeight;
</script></body>"""


def chromium(args: list[str], width: int, height: int) -> str:
    exe = shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run(
            [exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
    if r.returncode != 0:
        sys.exit(f"chromium failed: {r.stderr[-2000:]}")
    return r.stdout


def heights(page: Path, width: int, height: int) -> tuple[int, int]:
    """(folded, opened) page height in CSS px at ``width``."""
    html = page.read_text()
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html, count=1)
    html = html.replace("</body>", MEASURE, 1)
    with tempfile.TemporaryDirectory() as d:
        copy = Path(d) / page.name
        copy.write_text(html)
        dom = chromium(["--dump-dom", copy.as_uri()], width, height)
    folded = re.search(r'data-folded="(\d+)"', dom)
    opened = re.search(r'data-opened="(\d+)"', dom)
    if not folded or not opened:
        sys.exit("could not read the page height")
    return int(folded.group(1)), int(opened.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path)
    ap.add_argument("--shot", type=Path, help="write the first screen here (PNG)")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=900)
    a = ap.parse_args()
    page = a.page.resolve()
    if a.shot:
        chromium([f"--screenshot={a.shot.resolve()}", page.as_uri()], a.width, a.height)
        print(f"first screen: {a.shot}")
    folded, opened = heights(page, a.width, a.height)
    print(f"page height at {a.width} px: {folded} px folded, {opened} px with every detail open")


if __name__ == "__main__":
    main()
