"""The comparison page, drawn on the server from the comparison's JSON form: a sortable table, the
curves of the selected runs as one SVG plot, and a side-by-side diff of two runs' submitted apps.

No JavaScript library and no CDN: sorting is a link per column header, choosing curves and the two
runs to diff is a GET form. Every text is escaped here; the caller hands in texts already masked.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from torchx_airflow.lineage.metrics import as_metric
from torchx_airflow.plugins.render import STATE_CLASS
from torchx_airflow.plugins.text import link_target

PLOT_W, PLOT_H = 760, 300
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 64, 16, 14, 36
TICKS = 5
PARAM_WIDTH = 48  # characters of a parameter shown in the table (the diff shows it whole)
PALETTE = (
    "#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c",
    "#0891b2", "#be185d", "#4d7c0f", "#7c3aed", "#b45309", "#0f766e", "#475569",
)  # fmt: skip
FIXED_HEADERS = (
    ("run", "Run"),
    ("state", "State"),
    ("attempts", "Attempts"),
    ("elapsed_s", "Elapsed s"),
    ("cpu_hours", "CPU-h"),
    ("gpu_hours", "GPU-h"),
    ("cost", "Cost"),
    ("cache_hit", "Cache hit"),
)


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def fmt_number(value: float) -> str:
    """A number as the table shows it: ints whole, others to 5 significant digits."""
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.5g}"


def _query(base: Mapping[str, Any], **changes: Any) -> str:
    """``?...`` with ``base`` (lists repeat their key) and ``changes`` (None drops a key)."""
    merged = {**base, **changes}
    pairs: list[tuple[str, str]] = []
    for key, value in merged.items():
        if value is None or value == "":
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            pairs.append((key, str(item)))
    return "?" + urlencode(pairs)


def _cell(value: Any, width: int = 0) -> str:
    """A table cell; ``width``: texts longer than that are cut in the middle (whole in the tooltip)."""
    if value is None:
        return '<td class="none">–</td>'
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, int | float):
        return f'<td class="num">{_esc(fmt_number(value))}</td>'
    return f"<td>{_esc(value)}</td>"


def run_label(run: Mapping[str, Any], one_dag_run: bool) -> str:
    """``[3]`` for map index 3 when every row is of one DAG run; else the DAG run id too."""
    index = f"[{run['map_index']}]" if run["map_index"] >= 0 else ""
    if one_dag_run:
        return index or str(run["dag_run_id"])
    return f"{run['dag_run_id']} {index}".rstrip()


def _row_values(run: Mapping[str, Any], one_dag_run: bool) -> dict[str, Any]:
    usage = run.get("usage") or {}
    gpu = usage.get("gpu_hours") or {}
    cost = run.get("cost")
    return {
        "run": run_label(run, one_dag_run),
        "state": run.get("state") or run.get("task_state"),
        "attempts": run.get("attempts"),
        "elapsed_s": run.get("elapsed_s"),
        "cpu_hours": usage.get("cpu_hours"),
        "gpu_hours": sum(gpu.values()) if gpu else None,
        "cost": None if cost is None else f"{fmt_number(cost)} {run.get('currency') or ''}".strip(),
        "cache_hit": run.get("cache_hit"),
    }


def _header(column: str, title: str, data: Mapping[str, Any], query: Mapping[str, Any]) -> str:
    descending = data["sort"] == column and data["order"] == "asc"
    arrow = ""
    if data["sort"] == column:
        arrow = " ▲" if data["order"] == "asc" else " ▼"
    href = _query(query, sort=column, order="desc" if descending else "asc")
    return f'<th><a href="{_esc(href)}">{_esc(title)}{arrow}</a></th>'


def promote_cell(run: Mapping[str, Any], promote_url: str | None, data: Mapping[str, Any]) -> str:
    """The row's promotion control: a form for ``promote_url/<dag_id>/<dag_run_id>``, which
    ``static/promote.js`` sends as JSON (the endpoint takes nothing else); disabled without a URL."""
    fields = {
        "dag_id": data["dag_id"],
        "dag_run_id": run["dag_run_id"],
        "task_id": data["task_id"],
        "map_index": run["map_index"],
        "torchx_run_id": run.get("torchx_run_id") or "",
    }
    hidden = "".join(f'<input type="hidden" name="{_esc(k)}" value="{_esc(v)}">' for k, v in fields.items())
    if promote_url is None or not run.get("torchx_run_id"):
        return (
            '<td><button type="button" disabled title="Promotion is not available here">Promote</button></td>'
        )
    action = f"{promote_url}/{quote(str(data['dag_id']), safe='')}/{quote(str(run['dag_run_id']), safe='')}"
    return (
        f'<td><form class="promote" method="post" action="{_esc(action)}">{hidden}'
        '<button type="submit">Promote</button></form></td>'
    )


def render_table(data: Mapping[str, Any], query: Mapping[str, Any], promote_url: str | None) -> str:
    """The runs table; the curve and diff choices are inputs of the page's GET form ``pick``."""
    params, metrics = data["params"], data["metrics"]
    heads = ['<th title="plot">Plot</th><th title="diff: left">A</th><th title="diff: right">B</th>']
    # run and state, then what the runs are judged by, then what they cost, then what differed
    fixed = [_header(column, title, data, query) for column, title in FIXED_HEADERS]
    heads += fixed[:2] + [_header(f"metric:{name}", name, data, query) for name in metrics] + fixed[2:]
    heads += [_header(f"param:{name}", name, data, query) for name in params]
    heads += ["<th>Lineage</th><th>Promote</th>"]
    selected, diff = set(data["selected"]), data.get("diff") or {}
    body = []
    for run in data["runs"]:
        key = run["key"]
        values = _row_values(run, bool(data["dag_run_id"]))
        state = values["state"] or ""
        check = " checked" if key in selected else ""
        picks = (
            f'<td><input type="checkbox" form="pick" name="show" value="{_esc(key)}"{check}></td>'
            f'<td><input type="radio" form="pick" name="a" value="{_esc(key)}"'
            f"{' checked' if diff.get('a') == key else ''}></td>"
            f'<td><input type="radio" form="pick" name="b" value="{_esc(key)}"'
            f"{' checked' if diff.get('b') == key else ''}></td>"
        )
        cells = [_cell(values[column]) for column, _ in FIXED_HEADERS]
        cells[1] = f'<td><span class="state {STATE_CLASS.get(state, "")}">{_esc(state or "–")}</span></td>'
        cells[2:2] = [_cell(run["metrics"].get(name)) for name in metrics]
        cells += [_cell(run["params"].get(name), PARAM_WIDTH) for name in params]
        lineage = run["links"].get("lineage", "")
        link = f'<a href="{_esc(lineage)}">lineage</a>' if link_target(lineage) == "_top" else "–"
        body.append(
            f'<tr data-key="{_esc(key)}">{picks}{"".join(cells)}<td>{link}</td>'
            f"{promote_cell(run, promote_url, data)}</tr>"
        )
    return (
        f'<table class="runs"><thead><tr>{"".join(heads)}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def finite_points(points: Sequence[Sequence[Any]]) -> list[list[float]]:
    """The points ``[x, y]`` whose coordinates are both finite numbers, as floats; others dropped."""
    kept = []
    for point in points:
        x, y = (as_metric(point[0]), as_metric(point[1])) if len(point) == 2 else (None, None)
        if x is not None and y is not None:
            kept.append([x, y])
    return kept


def fraction(value: float, low: float, high: float) -> float:
    """Where ``value`` falls between ``low`` (0) and ``high`` (1); 0.5 when they are one value. A span
    past a float's range (``-1.7e308`` to ``1.7e308``) is measured in halves."""
    span = high - low
    if not math.isfinite(span):
        return (value / 2 - low / 2) / (high / 2 - low / 2)
    return (value - low) / span if span else 0.5


def nice_ticks(low: float, high: float, count: int = TICKS) -> list[float]:
    """Ticks at round values (1, 2 or 5 times a power of ten apart) from at or below ``low`` to at or
    above ``high``, about ``count`` of them; an axis drawn from the first to the last. A range no
    round step can span (past a float's range, or narrower than the smallest float's steps) is
    ``[low, high]``, or ``[low]`` for one value.

    Example::

        nice_ticks(0.1234, 0.9876)  # [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    """
    low, high = min(low, high), max(low, high)
    if not (math.isfinite(low) and math.isfinite(high)):
        return [low, high]
    ticks = _round_ticks(low, high, count)
    if ticks is None:
        return [low] if low == high else [low, high]
    return ticks


def _round_ticks(low: float, high: float, count: int) -> list[float] | None:
    """``nice_ticks`` of a finite range; None when no round step spans it."""
    first_low, first_high = low, high
    if high == low:
        half = abs(low) / 2 or 0.5
        low, high = low - half, high + half
    step_size = (high - low) / max(1, count - 1)
    if not (math.isfinite(step_size) and step_size > 0):
        return None
    magnitude = 10.0 ** math.floor(math.log10(step_size))
    if not (math.isfinite(magnitude) and magnitude > 0):
        return None
    candidates = [
        (math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9), step)
        for step in (magnitude, 2 * magnitude, 5 * magnitude, 10 * magnitude)
        if math.isfinite(low / step) and math.isfinite(high / step)
    ]
    if not candidates:
        return None
    # the tick count nearest to ``count``; a tie keeps the finer step (min keeps the first)
    first, last, step = min(candidates, key=lambda c: abs(c[1] - c[0] + 1 - count))
    digits = max(0, -math.floor(math.log10(step)))
    ticks = [round(i * step, digits) + 0.0 for i in range(first, last + 1)]
    if len(ticks) < 2 or not all(map(math.isfinite, ticks)) or ticks[0] > first_low or ticks[-1] < first_high:
        return None
    return ticks


def render_curves(
    series: Mapping[str, Sequence[Sequence[float]]], labels: Mapping[str, str], metric: str
) -> str:
    """One SVG plot: a polyline per run (``series``: row key -> ``[[step, value], ...]``), axes with
    ticks, and a legend; an empty note when no selected run logged ``metric``."""
    # a store's step past a float's range (an int of 400 digits) cannot be placed: not drawn
    curves = {key: drawable for key, points in series.items() if (drawable := finite_points(points))}
    if not curves:
        return f'<p class="none">No selected run logged a curve of {_esc(metric or "any metric")}.</p>'
    steps = [p[0] for points in curves.values() for p in points]
    values = [p[1] for points in curves.values() for p in points]
    x_ticks, y_ticks = nice_ticks(min(steps), max(steps)), nice_ticks(min(values), max(values))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    width, height = PLOT_W - MARGIN_L - MARGIN_R, PLOT_H - MARGIN_T - MARGIN_B

    def x(step: float) -> float:
        return MARGIN_L + fraction(step, x0, x1) * width

    def y(value: float) -> float:
        return MARGIN_T + (1 - fraction(value, y0, y1)) * height

    parts = [f'<rect class="plot-bg" x="{MARGIN_L}" y="{MARGIN_T}" width="{width}" height="{height}"/>']
    for tick in y_ticks:
        parts.append(
            f'<line class="grid" x1="{MARGIN_L}" x2="{MARGIN_L + width}" '
            f'y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>'
            f'<text class="tick" x="{MARGIN_L - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
            f"{_esc(fmt_number(tick))}</text>"
        )
    for tick in x_ticks:
        parts.append(
            f'<text class="tick" x="{x(tick):.1f}" y="{MARGIN_T + height + 16}" text-anchor="middle">'
            f"{_esc(fmt_number(tick))}</text>"
        )
    parts.append(
        f'<text class="axis" x="{MARGIN_L + width / 2}" y="{PLOT_H - 4}" text-anchor="middle">step</text>'
    )
    legend = []
    for i, (key, points) in enumerate(curves.items()):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{x(p[0]):.1f},{y(p[1]):.1f}" for p in points)
        parts.append(
            f'<polyline class="curve" data-key="{_esc(key)}" points="{coords}" stroke="{color}">'
            f"<title>{_esc(labels.get(key, key))}</title></polyline>"
        )
        if len(points) == 1:
            parts.append(
                f'<circle cx="{x(points[0][0]):.1f}" cy="{y(points[0][1]):.1f}" r="3" fill="{color}"/>'
            )
        legend.append(f'<span class="swatch" style="background:{color}"></span>{_esc(labels.get(key, key))}')
    svg = (
        f'<svg class="curves" xmlns="http://www.w3.org/2000/svg" width="{PLOT_W}" height="{PLOT_H}" '
        f'viewBox="0 0 {PLOT_W} {PLOT_H}" role="img" aria-label="{_esc(metric)} by step">'
        f"{''.join(parts)}</svg>"
    )
    items = "".join(f"<li>{item}</li>" for item in legend)
    caption = f"<figcaption>{_esc(metric)} by step</figcaption>"
    return f'<figure class="plot">{caption}{svg}<ul class="legend">{items}</ul></figure>'


def render_diff(diff: Mapping[str, Any] | None) -> str:
    """Two runs' submitted apps side by side, one parameter a line, the lines that differ marked."""
    if not diff:
        return (
            '<p class="none">Choose two runs (columns A and B) to see what each submitted, side by side.</p>'
        )
    lines = []
    for line in diff["lines"]:
        klass = "same" if line["same"] else "differs"
        a = "–" if line["a"] is None else line["a"]
        b = "–" if line["b"] is None else line["b"]
        lines.append(
            f'<tr class="{klass}"><th>{_esc(line["name"])}</th><td>{_esc(a)}</td><td>{_esc(b)}</td></tr>'
        )
    return (
        f'<table class="diff"><thead><tr><th>parameter</th><th>A · {_esc(diff["a_label"])}</th>'
        f"<th>B · {_esc(diff['b_label'])}</th></tr></thead><tbody>{''.join(lines)}</tbody></table>"
    )


def curves_left_out(data: Mapping[str, Any]) -> str:
    """What the plot leaves out, and why: runs not selected (their curves were not read) and
    selected runs over the plot's limit."""
    notes = []
    if data.get("curves_not_selected"):
        notes.append(
            f"Curves of {data['curves_not_selected']} other runs were not read: tick Plot on them "
            "to draw them."
        )
    over = data.get("selected_not_plotted") or []
    if over:
        notes.append(
            f"{len(over)} selected runs are not drawn: the plot takes at most {data['max_curves']} "
            f"at once ({', '.join(over)})."
        )
    return "".join(f'<p class="left-out">{_esc(note)}</p>' for note in notes)


def render_compare_page(
    data: Mapping[str, Any],
    *,
    static_url: str,
    json_url: str,
    query: Mapping[str, Any],
    promote_url: str | None = None,
) -> str:
    """The whole page from the comparison's JSON form ``data`` (already masked)."""
    scope = (
        f"DAG run {data['dag_run_id']}"
        if data["dag_run_id"]
        else f"the DAG's last {query.get('last') or len(data['runs'])} DAG runs"
    )
    labels = {run["key"]: run_label(run, bool(data["dag_run_id"])) for run in data["runs"]}
    metric_options = "".join(
        f'<option value="{_esc(name)}"{" selected" if name == data["metric"] else ""}>{_esc(name)}</option>'
        for name in data["series_metrics"]
    )
    keep = "".join(
        f'<input type="hidden" name="{_esc(k)}" value="{_esc(v)}">'
        for k, v in query.items()
        if k in ("sort", "order", "last", "task_id", "layout") and v not in (None, "")
    )
    curves = {key: (by_metric.get(data["metric"]) or []) for key, by_metric in data["series"].items()}
    warnings = "".join(f'<div class="warning">{_esc(w)}</div>' for w in data["warnings"])
    cut = ""
    if data["rows_not_shown"]:
        cut = (
            f'<div class="warning cut">{data["rows_not_shown"]} more runs of the task not shown '
            f"(in older DAG runs, or over {data['max_rows']} rows).</div>"
        )
    if data["runs"]:
        table = render_table(data, query, promote_url)
    else:
        table = '<div class="empty"><h2>No runs of this task here</h2></div>'
    script = f'\n<script src="{_esc(static_url)}/promote.js" defer></script>' if promote_url else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>TorchX runs · {_esc(data["dag_id"])} · {_esc(data["task_id"])}</title>
<link rel="stylesheet" href="{_esc(static_url)}/lineage.css">
<link rel="stylesheet" href="{_esc(static_url)}/compare.css">{script}
</head><body class="compare">
<header>
  <div class="title"><h1>TorchX runs compared</h1>
    <span class="run-id">{_esc(data["dag_id"])} · {_esc(data["task_id"])} · {_esc(scope)}</span></div>
  <div class="controls"><a class="json" href="{_esc(json_url)}" target="_blank" rel="noopener">JSON</a></div>
  <div class="stats">{len(data["runs"])} runs · {len(data["params"])} parameters differ ·
    trackers: {_esc(", ".join(data["trackers"]) or "none")}</div>
</header>
{cut}{warnings}
<form id="pick" method="get" class="pick">{keep}
  <label>Curve <select name="metric">{metric_options}</select></label>
  <button type="submit">Plot and diff the chosen runs</button>
</form>
<section class="table-wrap">{table}</section>
<section class="plots">{render_curves(curves, labels, data["metric"] or "")}{curves_left_out(data)}</section>
<section class="diff-wrap"><h2>Submitted apps</h2>{render_diff(data.get("diff"))}</section>
</body></html>
"""
