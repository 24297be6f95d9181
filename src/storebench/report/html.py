"""One self-contained HTML page: inline CSS, charts as inline SVG, no script,
and a Content-Security-Policy that forbids the page any fetch (so even a
mistake in a chart cannot make a browser go to the network). Every piece of
text from results is escaped here, in one place."""

from __future__ import annotations

from html import escape

from storebench.report.views import Figure, Section, Table, Text

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"

CSS = """
:root { --fg:#1d232a; --muted:#5b6672; --line:#d9dee3; --bg:#fff; --head:#f3f5f7; --accent:#1f5fa8; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--fg); background: var(--bg); }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: var(--head); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 2px 0; color: var(--muted); }
.badges span { display: inline-block; margin: 6px 6px 0 0; padding: 2px 8px; border-radius: 10px;
               background: #e4e9ef; font-size: 12px; }
.badges .ok { background: #d8f0dc; } .badges .failed { background: #f8d7d7; }
.badges .interrupted { background: #fbecc7; }
nav { padding: 8px 28px; border-bottom: 1px solid var(--line); font-size: 13px; }
nav a { margin-right: 12px; color: var(--accent); text-decoration: none; white-space: nowrap; }
nav a.sub { color: var(--muted); }
main { padding: 8px 28px 40px; max-width: 1400px; }
h2 { margin: 28px 0 6px; padding-bottom: 4px; border-bottom: 2px solid var(--line); font-size: 19px; }
h3 { margin: 22px 0 6px; font-size: 16px; }
.note { color: var(--muted); margin: 4px 0 10px; }
table { border-collapse: collapse; margin: 6px 0 16px; font-size: 13px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border: 1px solid var(--line); padding: 3px 8px; vertical-align: top; }
th { background: var(--head); font-weight: 600; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
td.l, th.l { text-align: left; }
tr.failed td { background: #fdf0f0; } tr.interrupted td { background: #fdf8ea; }
.scroll { overflow-x: auto; }
figure { margin: 10px 0 18px; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 13px; }
pre { background: var(--head); padding: 8px; overflow-x: auto; font-size: 12px; }
footer { color: var(--muted); font-size: 12px; padding: 0 28px 20px; }
p.lead { margin: 6px 0; font-size: 15px; max-width: 70em; }
.warning { margin: 6px 0; padding: 6px 10px; border-left: 4px solid #c77c00; background: #fff4dc; }
section#warnings { margin-top: 12px; }
section#warnings h2 { color: #8a5300; border-color: #e8c27a; }
details.fold { margin: 10px 0; border-top: 1px solid var(--line); }
details.fold > summary { cursor: pointer; padding: 6px 0; }
details.fold > summary > h2 { display: inline; border: 0; margin: 0; font-size: 17px; }
"""


def e(s: object) -> str:
    return escape(str(s), quote=True)


def breakable(s: object) -> str:
    """Escaped text that may wrap after ``_`` and ``/`` too (column names
    like ``write_comments mean``): a wide table fits the page's width."""
    return e(s).replace("_", "_<wbr>").replace("/", "/<wbr>")


def table(t: Table, view: str) -> str:
    al = t.aligns()
    head = "".join(
        f'<th class="{a}" scope="col">{breakable(c)}</th>'
        for c, a in zip(t.columns, al, strict=False)
    )
    body = []
    classes = t.row_classes or []
    for i, row in enumerate(t.rows):
        cls = f' class="{e(classes[i])}"' if i < len(classes) and classes[i] else ""
        cells = "".join(f'<td class="{a}">{e(c)}</td>' for c, a in zip(row, al, strict=False))
        body.append(f"<tr{cls}>{cells}</tr>")
    out = f'<div class="scroll"><table class="data" data-view="{e(view)}">'
    if t.title:
        out += f"<caption>{e(t.title)}</caption>"
    out += f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    if t.note:
        out += f'<p class="note">{e(t.note)}</p>'
    return out


def figure(f: Figure) -> str:
    cap = e(f.title) + (f" — {e(f.caption)}" if f.caption else "")
    # f.svg is matplotlib's own XML output, text already escaped by its writer
    return f'<figure data-chart="{e(f.name)}">{f.svg}<figcaption>{cap}</figcaption></figure>'


def text(t: Text) -> str:
    if t.pre:
        return f"<pre>{e(t.text)}</pre>"
    if t.kind == "warning":
        return f'<p class="warning" role="alert">{e(t.text)}</p>'
    if t.kind == "lead":
        return f'<p class="lead">{e(t.text)}</p>'
    return f'<p class="note">{e(t.text)}</p>'


def render(
    title: str,
    intro: list[str],
    badges: list[tuple[str, str]],
    sections: list[Section],
    footer: str,
) -> str:
    nav = []
    body = []
    open_fold = False  # a folded section and the deeper ones after it: one <details>
    for s in sections:
        sid = e(s.id)
        cls = ' class="sub"' if s.level > 2 else ""
        if s.level <= 2 or s.folded:
            nav.append(f'<a href="#{sid}"{cls}>{e(s.title)}</a>')
        tag = f"h{min(max(s.level, 2), 4)}"
        if s.level <= 2 and open_fold:
            body.append("</details>")
            open_fold = False
        if s.folded:
            if open_fold:
                body.append("</details>")
            body.append(
                f'<details class="fold" id="{sid}"><summary><{tag}>{e(s.title)}</{tag}></summary>'
            )
            body.append(f'<section data-id="{sid}">')
            open_fold = True
        else:
            body.append(f'<section id="{sid}"><{tag}>{e(s.title)}</{tag}>')
        for b in s.blocks:
            if isinstance(b, Table):
                body.append(table(b, s.id))
            elif isinstance(b, Figure):
                body.append(figure(b))
            else:
                body.append(text(b))
        body.append("</section>")
    if open_fold:
        body.append("</details>")
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="referrer" content="no-referrer">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{e(title)}</title>",
            f"<style>{CSS}</style></head><body>",
            f"<header><h1>{e(title)}</h1>",
            *(f"<p>{e(line)}</p>" for line in intro),
            '<div class="badges">'
            + "".join(f'<span class="{e(c)}">{e(t)}</span>' for t, c in badges)
            + "</div></header>",
            f"<nav>{' '.join(nav)}</nav>",
            "<main>",
            *body,
            "</main>",
            f"<footer>{e(footer)}</footer>",
            "</body></html>",
            "",
        ]
    )
