"""The pieces of a report page, in HTML and in Markdown: tables whose cells may carry a colour and a
tooltip, a chart beside the table it illustrates, collapsed detail, and the page around them.

A page never scrolls sideways at 1,366 pixels: the body is at most 1,240 pixels wide, a table that is
still too wide scrolls inside its own box, a chart shrinks to its column, and a table beside a chart
goes above it on a narrow screen. `tests.fixtures.page_check` measures that in a real browser.
"""

from __future__ import annotations

import base64
import html
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from experiments.summary.verdict_words import CSS_CLASS, Reading


@dataclass(frozen=True)
class Cell:
    """A table cell: its text, a CSS class (a verdict's colour) and a tooltip."""

    text: str
    css: str = ""
    title: str = ""

    def __str__(self) -> str:
        return self.text


def verdict_cell(reading: Reading | None, title: str | None = None) -> Cell:
    """`ok`, `VIOLATED (3)`, `protected (1)` or `unknown`, coloured by word, its meaning as the tooltip."""
    if reading is None:
        return Cell("-")
    return Cell(reading.label, CSS_CLASS[reading.word], reading.line if title is None else title)


@dataclass(frozen=True)
class RowHeader:
    """A row's name and, in smaller type under it, what the row means (said once per row)."""

    name: str
    note: str = ""

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, kw_only=True)
class Figure:
    path: Path
    caption: str          # one sentence: what to see


@dataclass(kw_only=True)
class Table:
    """A titled table (first column: row headers) with the line under it: rows hidden, checks folded."""

    title: str
    frame: pd.DataFrame
    note: str = ""                   # one line above the table
    hidden: str = ""                 # e.g. "3 rows hidden: all zero or blank (setup, warmup, teardown)"
    folded: tuple[str, list[tuple[str, str]]] | None = None   # ("7 checks ok on every run", [(name, meaning)])


@dataclass(kw_only=True)
class Block:
    """Tables with the charts that illustrate them, side by side."""

    tables: list[Table]
    figures: list[Figure] = field(default_factory=list)


@dataclass(kw_only=True)
class Detail:
    """A collapsed part: its summary line, tables, charts and lines of text."""

    summary: str
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Section:
    """One scenario (or one part of a campaign): its blocks, then its collapsed detail."""

    title: str
    anchor: str
    intro: str = ""
    blocks: list[Block] = field(default_factory=list)
    details: list[Detail] = field(default_factory=list)


# -- HTML ------------------------------------------------------------------------------------------

STYLE = """
*, *::before, *::after { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; padding: 12px 24px 48px;
       max-width: 1240px; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; margin: 0.2em 0 0.1em; } h2 { font-size: 1.25em; margin: 1.4em 0 0.3em; }
h3 { font-size: 1.02em; margin: 0.9em 0 0.3em; }
p.meta, p.note, .hidden, figcaption { color: #555; font-size: 0.88em; margin: 0.2em 0 0.5em; }
#findings { background: #f6f8fa; border: 1px solid #dde3ea; border-radius: 6px; padding: 2px 16px 6px; }
#findings h2 { margin-top: 0.5em; } #findings p { margin: 0.45em 0; }
section.scenario { border-top: 2px solid #e3e3e3; margin-top: 1.2em; }
.pair { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 8px 28px; align-items: start; }
.pair.solo { grid-template-columns: minmax(0, 1fr); }
@media (max-width: 980px) { .pair { grid-template-columns: minmax(0, 1fr); } }
.box { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 0.3em 0 0.4em; font-size: 0.9em; }
th, td { border: 1px solid #d0d0d0; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f2f2f2; } th.row { text-align: left; font-weight: 600; background: #fafafa; }
th.row small { display: block; font-weight: normal; color: #666; max-width: 30em; }
td.bad { background: #fbd5d5; font-weight: bold; } td.good { background: #e3f4e1; }
td.unknown { background: #f1f1f1; } td.protected { background: #dceefb; }
td[title] { cursor: help; } td.bad, td.good, td.unknown, td.protected { white-space: nowrap; }
thead th:first-child { text-align: left; }
figure { margin: 0.4em 0 0.8em; } figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
details { margin: 0.4em 0; } details > summary { cursor: pointer; color: #1f4e8c; }
details.section { border: 1px solid #e3e3e3; border-radius: 4px; padding: 4px 10px; }
details.folded { font-size: 0.9em; } details.folded ul { margin: 0.3em 0; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; }
"""


def image_data(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def _cell_html(value: object, first: bool) -> str:
    if isinstance(value, RowHeader):
        note = f"<small>{html.escape(value.note)}</small>" if value.note else ""
        return f"<th class=row scope=row>{html.escape(value.name)}{note}</th>"
    if first:
        return f"<th class=row scope=row>{html.escape(text(value))}</th>"
    if isinstance(value, Cell):
        css = f" class='{value.css}'" if value.css else ""
        title = f" title='{html.escape(value.title, quote=True)}'" if value.title else ""
        return f"<td{css}{title}>{html.escape(value.text)}</td>"
    return f"<td>{html.escape(text(value))}</td>"


def text(value: object) -> str:
    """A cell as text: blanks for missing values; numbers are expected formatted already."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def table_html(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p class=note>(none)</p>"
    head = "".join(f"<th>{html.escape(str(column))}</th>" for column in frame.columns)
    rows = ["<tr>" + "".join(_cell_html(value, index == 0) for index, value in enumerate(row)) + "</tr>"
            for row in frame.itertuples(index=False)]
    return f"<div class=box><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"


def _table_part(table: Table) -> str:
    parts = [f"<h3>{html.escape(table.title)}</h3>"] if table.title else []
    if table.note:
        parts.append(f"<p class=note>{html.escape(table.note)}</p>")
    if len(table.frame):
        parts.append(table_html(table.frame))
    if table.folded:
        line, items = table.folded
        listed = "".join(f"<li><b>{html.escape(name)}</b>: {html.escape(meaning)}</li>" for name, meaning in items)
        parts.append(f"<details class=folded><summary>{html.escape(line)}</summary><ul>{listed}</ul></details>")
    if table.hidden:
        parts.append(f"<p class=hidden>{html.escape(table.hidden)}</p>")
    return "\n".join(parts)


def _figure_part(figure: Figure, out_dir: Path) -> str:
    link = html.escape(os.path.relpath(figure.path, out_dir))
    return (f"<figure><a href='{link}' title='open the chart at full size'><img alt='{html.escape(figure.caption)}' "
            f"src='{image_data(figure.path)}'></a><figcaption>{html.escape(figure.caption)}</figcaption></figure>")


def block_html(block: Block, out_dir: Path) -> str:
    left = "\n".join(_table_part(table) for table in block.tables)
    if not block.figures:
        return f"<div class='pair solo'><div>{left}</div></div>"
    right = "\n".join(_figure_part(figure, out_dir) for figure in block.figures)
    return f"<div class=pair><div>{left}</div><div>{right}</div></div>"


def detail_html(detail: Detail, out_dir: Path) -> str:
    inner = [f"<p class=note>{html.escape(line)}</p>" for line in detail.lines]
    inner += [_table_part(table) for table in detail.tables]
    inner += [_figure_part(figure, out_dir) for figure in detail.figures]
    return (f"<details class=section><summary>{html.escape(detail.summary)}</summary>"
            + "\n".join(inner) + "</details>")


def section_html(section: Section, out_dir: Path) -> str:
    parts = [f"<section class=scenario id='{html.escape(section.anchor)}'><h2>{html.escape(section.title)}</h2>"]
    if section.intro:
        parts.append(f"<p class=note>{html.escape(section.intro)}</p>")
    parts += [block_html(block, out_dir) for block in section.blocks]
    parts += [detail_html(detail, out_dir) for detail in section.details]
    parts.append("</section>")
    return "\n".join(parts)


def findings_html(title: str, paragraphs: list[tuple[str, str]]) -> str:
    """The "What these runs show" box: per paragraph a bold lead (the scenario) and its text."""
    body = "".join(f"<p><b>{html.escape(lead)}</b> {html.escape(text_)}</p>" for lead, text_ in paragraphs)
    return f"<section id=findings><h2>{html.escape(title)}</h2>{body}</section>"


def page_html(title: str, meta: str, findings: str, sections: list[str], tail: str = "") -> str:
    return ("<!doctype html><html lang=en><head><meta charset='utf-8'>"
            "<meta name=viewport content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p class=meta>{html.escape(meta)}</p>\n{findings}\n"
            + "\n".join(sections) + tail + "\n</body></html>\n")


# -- Markdown ----------------------------------------------------------------------------------

def table_markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_(none)_\n"

    def cell(value: object) -> str:
        return text(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def _table_md(table: Table, level: str) -> list[str]:
    lines = [f"{level} {table.title}\n"] if table.title else []
    if table.note:
        lines.append(table.note + "\n")
    if len(table.frame):
        lines.append(table_markdown(table.frame))
        notes = [(str(row[0]), row[0].note) for row in table.frame.itertuples(index=False)
                 if isinstance(row[0], RowHeader) and row[0].note]
        if notes:
            lines.append("\n".join(f"- `{name}`: {note}" for name, note in notes) + "\n")
    if table.folded:
        line, items = table.folded
        lines.append(f"{line}: " + ", ".join(f"`{name}`" for name, _ in items) + ".\n")
    if table.hidden:
        lines.append(f"_{table.hidden}_\n")
    return lines


def _figure_md(figure: Figure, out_dir: Path) -> list[str]:
    link = Path(os.path.relpath(figure.path, out_dir)).as_posix()
    return [f"![{figure.caption}]({link})\n", f"_{figure.caption}_\n"]


def section_markdown(section: Section, out_dir: Path) -> str:
    lines = [f"## {section.title}\n"]
    if section.intro:
        lines.append(f"_{section.intro}_\n")
    for block in section.blocks:
        for table in block.tables:
            lines += _table_md(table, "###")
        for figure in block.figures:
            lines += _figure_md(figure, out_dir)
    for detail in section.details:   # GitHub shows <details> collapsed, as the HTML page does
        lines.append(f"<details><summary>{html.escape(detail.summary, quote=False)}</summary>\n")
        lines += [line + "\n" for line in detail.lines]
        for table in detail.tables:
            lines += _table_md(table, "####")
        for figure in detail.figures:
            lines += _figure_md(figure, out_dir)
        lines.append("</details>\n")
    return "\n".join(lines)


def findings_markdown(title: str, paragraphs: list[tuple[str, str]]) -> str:
    return f"## {title}\n\n" + "\n".join(f"**{lead}** {text_}\n" for lead, text_ in paragraphs)
