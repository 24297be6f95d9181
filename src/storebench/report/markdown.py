"""Markdown rendering of report sections (GitHub-flavoured pipe tables).

Cell text is escaped for Markdown *and* HTML: Markdown renderers pass raw
HTML through, so an engine name like ``<script>`` must arrive as text."""

from __future__ import annotations

import html

from storebench.report.views import Figure, Section, Table, Text


def cell(text: str) -> str:
    s = html.escape(str(text), quote=False)
    return s.replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def prose(text: str) -> str:
    s = html.escape(str(text), quote=False)
    for ch in ("*", "_", "`", "[", "]"):
        s = s.replace(ch, "\\" + ch)
    return s


def table(t: Table) -> str:
    sep = {"l": ":---", "r": "---:"}
    lines = [
        "| " + " | ".join(cell(c) for c in t.columns) + " |",
        "| " + " | ".join(sep.get(a, "---") for a in t.aligns()) + " |",
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in t.rows]
    out = ""
    if t.title:
        out += f"**{prose(t.title)}**\n\n"
    out += "\n".join(lines) + "\n"
    if t.note:
        out += f"\n{prose(t.note)}\n"
    return out


def figure(f: Figure, plots_dir: str = "plots") -> str:
    out = f"![{prose(f.title)}]({plots_dir}/{f.name}.png)\n\n"
    if f.caption:
        out += f"{prose(f.caption)} "
    out += f"([SVG]({plots_dir}/{f.name}.svg))\n"
    return out


def text(t: Text) -> str:
    if t.pre:
        body = t.text.replace("```", "'''")
        return f"```\n{body}\n```\n"
    if t.kind == "warning":
        return "> **Warning:** " + prose(t.text) + "\n"
    return prose(t.text) + "\n"


def render(title: str, intro: list[str], sections: list[Section]) -> str:
    parts = [f"# {prose(title)}\n"]
    parts += [prose(line) + "\n" for line in intro]
    for s in sections:
        parts.append(f"{'#' * s.level} {prose(s.title)}\n")
        for b in s.blocks:
            if isinstance(b, Table):
                parts.append(table(b))
            elif isinstance(b, Figure):
                parts.append(figure(b))
            else:
                parts.append(text(b))
    return "\n".join(parts)
