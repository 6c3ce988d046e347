"""The report page: one self-contained HTML file (``report/index.html``) with the headline, a leaderboard per model,
every figure (embedded), the statistics, the cost, the identical-maps check and the run's settings and provenance.
It needs no server and no network: styles inline, figures as data URIs, one small script that reports a figure the
browser could not decode on the console (the CI's browser test fails on any console message)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from faithbench.bench.report.sections import Section
from faithbench.bench.report.statistics_section import BEST, TIED

_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d1d1f; }
main { max-width: 1840px; margin: 0 auto; padding: 1.5rem 2rem 4rem; }
h1 { font-size: 1.7rem; margin: .2rem 0; } h2 { margin-top: 2.4rem; border-bottom: 1px solid #ddd; }
h3 { margin-top: 1.6rem; } p.note, figcaption, .meta { color: #555; max-width: 70rem; }
nav ol { columns: 3; padding-left: 1.2rem; } nav a { text-decoration: none; }
.scroll { overflow-x: auto; margin: .6rem 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }
th, td { padding: .25rem .5rem; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { background: #f5f5f7; white-space: normal; vertical-align: bottom; }
td:first-child, th:first-child { text-align: left; }
td.key { text-align: left; font-weight: 600; }
td.best { background: #dff3e3; font-weight: 600; } td.tied { background: #f0f9f1; }
tr.control td { color: #777; font-style: italic; } tr.first-control td { border-top: 2px solid #bbb; }
.p1 { color: #777; font-size: 11px; font-weight: normal; }
td.pick { text-align: left; white-space: normal; } td.pick b { font-weight: 600; }
table.headline th { text-align: left; }
td.pick span { color: #555; font-size: 12px; }
figure { margin: 1.2rem 0 2rem; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
dl { display: grid; grid-template-columns: max-content auto; gap: .2rem 1rem; } dt { font-weight: 600; }
dd { margin: 0; font-family: ui-monospace, monospace; font-size: 13px; overflow-wrap: anywhere; }
"""

# Any figure the browser cannot decode is a console error: the CI's headless browser fails the page on it.
_CHECK = """<script>
window.addEventListener("load", () => {
  for (const img of document.images) {
    if (!img.complete || img.naturalWidth === 0) console.error("figure not shown: " + img.alt);
  }
});
</script>"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _head(value: object) -> str:
    """A column head that may break after its underscores (metric names are long; a page must fit 1600 px)."""
    return _e(value).replace("_", "_<wbr>")


def _cell(value: object) -> str:
    """A leaderboard cell: ``mean ± ci [★|≈] [P1 p]`` with the mark as the cell's class and P1 set small."""
    text = str(value)
    kind = "best" if BEST in text else "tied" if TIED in text else ""
    main, _, p1 = text.partition(" P1 ")
    small = f'<br><span class="p1">P1 {_e(p1)}</span>' if p1 else ""
    return f'<td class="{kind}">{_e(main)}{small}</td>' if kind else f"<td>{_e(main)}{small}</td>"


def html_table(table: pd.DataFrame, keys: int = 0, marks: bool = False, controls: set[str] | None = None) -> str:
    """A table as HTML: the first ``keys`` columns left-aligned; with ``marks`` the cells' ★ / ≈ as classes;
    rows whose ``method`` is in ``controls`` greyed and set apart."""
    head = "".join(f"<th>{_head(c)}</th>" for c in table.columns)
    rows, seen_control = [], False
    for values in table.itertuples(index=False):
        record = dict(zip(table.columns, values, strict=True))
        control = controls is not None and record.get("method") in controls
        cls = ("control" + ("" if seen_control else " first-control")) if control else ""
        seen_control = seen_control or control
        cells = [f'<td class="key">{_e(v)}</td>' for v in values[:keys]]
        cells += [_cell(v) if marks else f"<td>{_e(v)}</td>" for v in values[keys:]]
        attr = f' class="{cls}"' if cls else ""
        rows.append(f"<tr{attr}>" + "".join(cells) + "</tr>")
    body = "\n".join(rows)
    return f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>'


def headline_table(table: pd.DataFrame) -> str:
    """The headline: per model and metric the best method (bold) over its mean and the count of tied methods."""
    head = "".join(f"<th>{_head(c)}</th>" for c in table.columns)
    rows = []
    for values in table.itertuples(index=False):
        cells = [f'<td class="key">{_e(values[0])}</td>']
        for value in values[1:]:
            method, _, rest = str(value).partition(" ")
            cells.append(f'<td class="pick"><b>{_head(method)}</b><br><span>{_e(rest)}</span></td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n'
        + "\n".join(rows)
        + "\n</tbody></table></div>"
    )


def _figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    caption = path.stem.replace("_", " ")
    return (
        f'<figure id="fig-{_e(path.stem)}"><img src="data:image/png;base64,{data}" alt="{_e(caption)}" '
        f'loading="eager"><figcaption>{_e(path.name)}</figcaption></figure>'
    )


def _section(section: Section) -> str:
    parts = [f'<h3 id="{_e(section.anchor)}">{_e(section.title)}</h3>', f'<p class="note">{_e(section.note)}</p>']
    if section.table is not None:
        keys = sum(c in ("model", "method", "seed") for c in section.table.columns)
        parts.append(html_table(section.table, keys=keys))
    if section.bullets:
        items = "".join(f"<li>{_e(b)}</li>" for b in section.bullets[1:])
        parts.append(f"<p>{_e(section.bullets[0])}</p><ul>{items}</ul>")
    return "\n".join(parts)


def _settings(run: dict[str, Any]) -> str:
    """The suite as the run resolved it and the provenance every row carries, as definition lists."""
    blocks = []
    for title, record in (("Suite", run.get("suite", {})), ("Provenance", run.get("provenance", {}))):
        items = "".join(
            f"<dt>{_e(k)}</dt><dd>{_e(json.dumps(v) if isinstance(v, dict | list) else v)}</dd>"
            for k, v in record.items()
        )
        blocks.append(f"<h3>{title}</h3><dl>{items}</dl>")
    return "\n".join(blocks)


def report_page(
    *,
    title: str,
    summary: str,
    headline: pd.DataFrame,
    leaderboard: pd.DataFrame,
    notes: list[str],
    figures: list[Path],
    sections: list[Section],
    run: dict[str, Any],
    controls: set[str],
) -> str:
    """The whole page as one HTML document (UTF-8)."""
    models = list(dict.fromkeys(leaderboard["model"]))
    toc = [("headline", "Headline"), ("leaderboard", "Leaderboard per model")]
    toc += [("figures", "Figures")] if figures else []
    toc += [(s.anchor, s.title) for s in sections] + [("settings", "Settings and provenance")]
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{_e(summary)}</p>',
        "<nav><ol>" + "".join(f'<li><a href="#{a}">{_e(t)}</a></li>' for a, t in toc) + "</ol></nav>",
        '<h2 id="headline">Headline</h2>',
        '<p class="note">The best method of each model on each metric (★ in the leaderboard) and its mean; '
        f"(+k {TIED}): k more methods not significantly worse. Controls are not contestants.</p>",
        headline_table(headline),
        '<h2 id="leaderboard">Leaderboard per model</h2>',
        "".join(f'<p class="note">{_e(n)}</p>' for n in notes),
        '<p class="note">Mean ± 95 % CI half-width. Rows: the methods best first by the first metric, then the '
        "control explainers (grey; the yardstick, not contestants).</p>",
    ]
    for model in models:
        part = leaderboard[leaderboard["model"] == model].drop(columns="model")
        part = part.loc[:, (part != "–").any()]  # metrics this model does not have
        body += [
            f'<h3 id="model-{_e(model)}">{_e(model)}</h3>',
            html_table(part, keys=1, marks=True, controls=controls),
        ]
    if figures:
        body += ['<h2 id="figures">Figures</h2>', *(_figure(p) for p in figures)]
    if sections:
        body += ['<h2 id="statistics">Statistics, cost and checks</h2>', *(_section(s) for s in sections)]
    body += ['<h2 id="settings">Settings and provenance</h2>', _settings(run)]
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + f"\n</main>\n{_CHECK}\n</body>\n</html>\n"
    )
