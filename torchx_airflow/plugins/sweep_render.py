"""The comparison page of a sweep, drawn on the server from its JSON form (``sweep_view.sweep_json``):
one curve per trial across its segments, the rung where each stopped, the promoted trial marked,
and a table of trials x rungs, the parameters that differ before the objective at each rung.

Like the comparison page: no JavaScript, no CDN, every text escaped here (the caller hands in texts
already masked). A job names its own metrics and parameters' values reach the page from XCom.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from torchx_airflow.plugins.compare_render import (
    MARGIN_B,
    MARGIN_L,
    MARGIN_R,
    MARGIN_T,
    PALETTE,
    PLOT_H,
    PLOT_W,
    _esc,
    finite_points,
    fmt_number,
    fraction,
    nice_ticks,
)
from torchx_airflow.plugins.text import link_target

PROMOTED_COLOR = "#b45309"
STOPPED_COLOR = "#94a3b8"
STOP_TEXT = {
    "finished": "finished",
    "not chosen": "not chosen",
    "failed": "failed",
    "sweep stopped": "sweep stopped",
    "pending": "pending",
    "not shown": "later segments not shown",
}


def _value(value: Any) -> str:
    return "–" if value is None else fmt_number(value)


def budget_axis(budgets: Sequence[float]) -> tuple[list[float], bool]:
    """The x axis of a sweep's curves: on a log scale with a tick at each rung's budget when the
    rungs grow by a factor (successive halving), else round ticks on a linear scale (one rung)."""
    distinct = sorted(set(budgets))
    if len(distinct) >= 2 and distinct[0] > 0:
        return distinct, True
    return nice_ticks(min(distinct, default=0.0), max(distinct, default=1.0)), False


def trial_title(trial: Mapping[str, Any]) -> str:
    """A trial as its curve's tooltip names it: id, the parameters that differ, where it stopped."""
    params = " ".join(f"{k}={v}" for k, v in trial["params"].items())
    stop = f"{STOP_TEXT.get(trial['stop'], trial['stop'])} at rung {trial['reached']}"
    mark = " · promoted" if trial["promoted"] else ""
    return f"{trial['id']} {params} · {stop}{mark}".replace("  ", " ")


@dataclass(frozen=True)
class _Plot:
    """Where a budget and a value fall in the plot: x on a log scale (or linear), y linear."""

    x0: float
    x1: float
    y0: float
    y1: float
    log_x: bool

    def x(self, budget: float) -> float:
        scale = math.log if self.log_x else float
        at = fraction(scale(budget), scale(self.x0), scale(self.x1))
        return MARGIN_L + at * (PLOT_W - MARGIN_L - MARGIN_R)

    def y(self, value: float) -> float:
        height = PLOT_H - MARGIN_T - MARGIN_B
        return MARGIN_T + (1 - fraction(value, self.y0, self.y1)) * height

    def holds(self, point: Sequence[float]) -> bool:
        """Whether the point lies inside the plot (and, on a log scale, right of zero)."""
        x, y = point[0], point[1]
        return (x > 0 or not self.log_x) and self.x0 <= x <= self.x1 and self.y0 <= y <= self.y1

    def coords(self, points: Sequence[Sequence[float]]) -> str:
        return " ".join(f"{self.x(p[0]):.1f},{self.y(p[1]):.1f}" for p in points)


def _axes(plot: _Plot, x_ticks: Sequence[float], y_ticks: Sequence[float]) -> list[str]:
    width, height = PLOT_W - MARGIN_L - MARGIN_R, PLOT_H - MARGIN_T - MARGIN_B
    parts = [f'<rect class="plot-bg" x="{MARGIN_L}" y="{MARGIN_T}" width="{width}" height="{height}"/>']
    for tick in y_ticks:
        parts.append(
            f'<line class="grid" x1="{MARGIN_L}" x2="{MARGIN_L + width}" '
            f'y1="{plot.y(tick):.1f}" y2="{plot.y(tick):.1f}"/>'
            f'<text class="tick y" x="{MARGIN_L - 6}" y="{plot.y(tick) + 4:.1f}" text-anchor="end">'
            f"{_esc(fmt_number(tick))}</text>"
        )
    for tick in x_ticks:
        parts.append(
            f'<line class="grid" x1="{plot.x(tick):.1f}" x2="{plot.x(tick):.1f}" '
            f'y1="{MARGIN_T}" y2="{MARGIN_T + height}"/>'
            f'<text class="tick x" x="{plot.x(tick):.1f}" y="{MARGIN_T + height + 16}" text-anchor="middle">'
            f"{_esc(fmt_number(tick))}</text>"
        )
    axis = "budget (log scale; a tick per rung)" if plot.log_x else "budget"
    parts.append(
        f'<text class="axis" x="{MARGIN_L + width / 2}" y="{PLOT_H - 4}" text-anchor="middle">{axis}</text>'
    )
    return parts


def _trial(plot: _Plot, trial: Mapping[str, Any], color: str, series: Sequence[Sequence[float]]) -> list[str]:
    """A trial's curve through its recorded values, a dot where it stopped, its per-epoch series
    when it logged one, the promoted trial's label."""
    klass = "promoted" if trial["promoted"] else ("finished" if trial["stop"] == "finished" else "stopped")
    tag = f'data-trial="{_esc(trial["id"])}"'
    title = f"<title>{_esc(trial_title(trial))}</title>"
    parts = []
    if series:
        parts.append(
            f'<polyline class="series" {tag} points="{plot.coords(series)}" stroke="{color}">'
            f"<title>{_esc(trial['id'])}: {_esc(trial['stop'])}, as logged each epoch</title></polyline>"
        )
    points = trial["curve"]
    parts.append(
        f'<polyline class="curve trial {klass}" {tag} points="{plot.coords(points)}" stroke="{color}">'
        f"{title}</polyline>"
    )
    cx, cy, radius = plot.x(points[-1][0]), plot.y(points[-1][1]), 5 if trial["promoted"] else 3
    parts.append(
        f'<circle class="end {klass}" {tag} cx="{cx:.1f}" cy="{cy:.1f}" r="{radius}" fill="{color}">'
        f"{title}</circle>"
    )
    if trial["promoted"]:
        parts.append(
            f'<text class="promoted-label" x="{cx - 8:.1f}" y="{cy - 8:.1f}" text-anchor="end">'
            f"★ {_esc(trial['id'])} promoted</text>"
        )
    return parts


def render_sweep_curves(data: Mapping[str, Any]) -> str:
    """One SVG plot: a polyline per trial through its segments' objective at their budgets, a dot
    where it stopped, the per-epoch series of the trials that got furthest (as logged), the promoted
    trial drawn over the others and labelled."""
    trials = [t for t in data["trials"] if t["curve"]]
    objective = data["objective"] or "the objective"
    if not trials:
        return f'<p class="none">No segment of this sweep recorded {_esc(objective)} yet.</p>'
    # both axes from what the workers recorded and the rungs' budgets: a tracker's series (any job
    # may write it) is drawn inside them, its points outside left out
    budgets = [b for r in data["rungs"] if (b := r.get("budget")) is not None]
    x_ticks, log_x = budget_axis(budgets + [p[0] for t in trials for p in t["curve"]])
    values = [p[1] for t in trials for p in t["curve"]]
    y_ticks = nice_ticks(min(values), max(values))
    plot = _Plot(x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1], log_x)
    series = {t["id"]: _drawable(t.get("series") or [], plot) for t in trials if t.get("highlight")}
    parts = _axes(plot, x_ticks, y_ticks)
    colors = _colors(data["trials"])
    # grey trials first (under), then those that got furthest, the promoted one on top
    for trial in sorted(trials, key=lambda t: (t["promoted"], t["id"] in colors)):
        parts += _trial(plot, trial, colors.get(trial["id"], STOPPED_COLOR), series.get(trial["id"]) or [])
    svg = (
        f'<svg class="curves sweep" xmlns="http://www.w3.org/2000/svg" width="{PLOT_W}" height="{PLOT_H}" '
        f'viewBox="0 0 {PLOT_W} {PLOT_H}" role="img" aria-label="{_esc(objective)} by budget, per trial">'
        f"{''.join(parts)}</svg>"
    )
    caption = f"<figcaption>{_esc(objective)} by budget, one curve per trial</figcaption>"
    note = ""
    if series and any(series.values()):
        note = (
            '<p class="left-out">Thin lines: the objective by epoch as the furthest trials\' segments logged '
            "it in their tracker (shown only, inside the recorded values' range; the rungs were chosen "
            "from the values each worker recorded, the dots and thick lines).</p>"
        )
    return f'<figure class="plot">{caption}{svg}{_legend(data["trials"], colors)}{note}</figure>'


def _drawable(series: Sequence[Sequence[float]], plot: _Plot) -> list[list[float]]:
    """A series' points inside the plot (a log scale has no step 0)."""
    return [p for p in finite_points(series) if plot.holds(p)]


def _colors(trials: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """A colour for each of the trials that got furthest (the promoted one its own); the others are
    drawn grey."""
    colors: dict[str, str] = {}
    furthest = [t for t in trials if t.get("highlight") or t["promoted"]]
    for i, trial in enumerate(furthest):
        colors[trial["id"]] = PROMOTED_COLOR if trial["promoted"] else PALETTE[i % len(PALETTE)]
    return colors


def _legend(trials: Sequence[Mapping[str, Any]], colors: Mapping[str, str]) -> str:
    items = []
    for trial in trials:
        if trial["id"] in colors:
            mark = "★ " if trial["promoted"] else ""
            items.append(
                f'<li><span class="swatch" style="background:{colors[trial["id"]]}"></span>'
                f"{mark}{_esc(trial_title(trial))}</li>"
            )
    others = sum(1 for t in trials if t["id"] not in colors and t["curve"])
    if others:
        items.append(
            f'<li><span class="swatch" style="background:{STOPPED_COLOR}"></span>{others} other trials '
            "(a dot where each stopped)</li>"
        )
    return f'<ul class="legend">{"".join(items)}</ul>'


def _rung_cell(segment: Mapping[str, Any] | None, trial: Mapping[str, Any]) -> str:
    if segment is None:
        return '<td class="none">–</td>'
    state = segment.get("state") or segment.get("task_state") or ""
    last = segment["rung"] == trial["reached"]
    klass = "num"
    if last and trial["stop"] in ("not chosen", "sweep stopped"):
        klass += " stopped"
    elif last and trial["stop"] == "failed":
        klass += " failed"
    hit = " · cache hit" if segment.get("cache_hit") else ""
    title = f"{state}{hit} · budget {_value(segment.get('budget'))}"
    text = _value(segment.get("value")) if segment.get("value") is not None else (state or "–")
    link = segment.get("link") or ""
    if link_target(link) == "_top":
        text_html = f'<a href="{_esc(link)}">{_esc(text)}</a>'
    else:
        text_html = _esc(text)
    return f'<td class="{klass}" title="{_esc(title)}">{text_html}</td>'


def render_sweep_table(data: Mapping[str, Any]) -> str:
    """Trials x rungs: the trial (promoted marked), the parameters that differ, the objective its
    segment recorded at each rung, where and why it stopped, what its segments cost."""
    params, rungs = data["params"], data["rungs"]
    heads = ["<th>Trial</th>"] + [f'<th class="param">{_esc(name)}</th>' for name in params]
    for rung in rungs:
        heads.append(f'<th class="rung">rung {rung["rung"]} · budget {_esc(_value(rung.get("budget")))}</th>')
    heads += ["<th>Stopped</th>", "<th>Cost</th>"]
    body = []
    for trial in data["trials"]:
        by_rung = {s["rung"]: s for s in trial["segments"]}
        mark = '<span class="promoted-mark" title="promoted">★ promoted</span> ' if trial["promoted"] else ""
        cells = [f"<td>{mark}{_esc(trial['id'])}</td>"]
        cells += [f"<td>{_esc(_value_text(trial['params'].get(name)))}</td>" for name in params]
        cells += [_rung_cell(by_rung.get(rung["rung"]), trial) for rung in rungs]
        stop = STOP_TEXT.get(trial["stop"], trial["stop"])
        state = {"finished": "st-ok", "failed": "st-bad", "pending": "st-run"}.get(trial["stop"], "")
        cells.append(
            f'<td class="stop" data-rung="{trial["reached"]}"><span class="state {state}">'
            f"rung {trial['reached']} · {_esc(stop)}</span></td>"
        )
        costs = [s["cost"] for s in trial["segments"] if s.get("cost") is not None]
        currency = next((s["currency"] for s in trial["segments"] if s.get("currency")), "")
        cost = f"{fmt_number(sum(costs))} {currency}".strip() if costs else None
        cells.append(f'<td class="num">{_esc(cost)}</td>' if cost else '<td class="none">–</td>')
        klass = ' class="promoted"' if trial["promoted"] else ""
        body.append(f'<tr data-trial="{_esc(trial["id"])}"{klass}>{"".join(cells)}</tr>')
    caption = (
        f"<caption>{_esc(data['objective'] or 'no objective recorded')} ({_esc(data['mode'])}) as each "
        "segment's worker recorded it, by rung; the last value of a trial marks where it stopped</caption>"
    )
    return (
        f'<table class="runs sweep">{caption}<thead><tr>{"".join(heads)}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _value_text(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return fmt_number(value)
    return str(value)


def render_rungs(data: Mapping[str, Any], runs_url: str) -> str:
    """One line per rung: its budget, the trials its plan gave it, why the sweep stopped before it;
    a link to the rung's runs in the comparison of its task."""
    items = []
    for rung in data["rungs"]:
        task_id = f"{data['sweep_id']}.rung_{rung['rung']}"
        link = f"{runs_url}?{urlencode({'task_id': task_id, 'layout': 'runs'})}"
        planned = "not planned yet" if rung["planned"] is None else f"{rung['planned']} trials"
        why = f" · stopped: {_esc(rung['stopped'])}" if rung.get("stopped") else ""
        items.append(
            f"<li>rung {rung['rung']} · budget {_esc(_value(rung.get('budget')))} · {planned}{why} · "
            f'<a href="{_esc(link)}">its runs</a></li>'
        )
    brackets = data.get("brackets") or []
    if len(brackets) > 1:  # a Hyperband bracket: its sweep's others, each a sweep of its own
        links = []
        for bracket in brackets:
            name = _esc(bracket.rsplit(".", 1)[-1])
            href = _esc(f"{runs_url}?{urlencode({'task_id': bracket})}")
            links.append(
                f"<b>{name} (shown)</b>" if bracket == data["sweep_id"] else f'<a href="{href}">{name}</a>'
            )
        items.append(f"<li>Hyperband brackets: {' · '.join(links)}</li>")
    return f'<ul class="rungs">{"".join(items)}</ul>'


def render_sweep_page(data: Mapping[str, Any], *, static_url: str, json_url: str, runs_url: str) -> str:
    """The whole page from the sweep's JSON form ``data`` (already masked); ``runs_url``: the
    comparison of one task of this DAG run (``.../compare/<dag_id>/<run_id>``)."""
    promoted = data.get("promoted")
    winner = ""
    if promoted:
        value = _esc(_value(promoted.get("value")))
        winner = f" · promoted {_esc(promoted['trial'])} ({value} at rung {promoted['rung']})"
    if data.get("promoted_elsewhere"):
        winner = f" · promoted: a trial of {_esc(data['promoted_elsewhere'])}"
    spent = f" · spent {_esc(fmt_number(data['spent']))}" if data.get("spent") else ""
    warnings = "".join(f'<div class="warning">{_esc(w)}</div>' for w in data["warnings"])
    if data["segments_not_shown"]:
        warnings += (
            f'<div class="warning cut">{data["segments_not_shown"]} more segments of the sweep not shown '
            f"(the view reads at most {data['max_segments']}).</div>"
        )
    table = render_sweep_table(data) if data["trials"] else '<div class="empty"><h2>No segment yet</h2></div>'
    objective = _esc(data["objective"] or "no objective recorded")
    where = f"{_esc(data['dag_id'])} · {_esc(data['sweep_id'])} · DAG run {_esc(data['dag_run_id'])}"
    stats = f"{len(data['trials'])} trials · {len(data['rungs'])} rungs · {objective} ({_esc(data['mode'])})"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>TorchX sweep · {_esc(data["dag_id"])} · {_esc(data["sweep_id"])}</title>
<link rel="stylesheet" href="{_esc(static_url)}/lineage.css">
<link rel="stylesheet" href="{_esc(static_url)}/compare.css">
</head><body class="compare">
<header>
  <div class="title"><h1>TorchX sweep compared</h1>
    <span class="run-id">{where}</span></div>
  <div class="controls"><a class="json" href="{_esc(json_url)}" target="_blank" rel="noopener">JSON</a></div>
  <div class="stats">{stats}{winner}{spent}</div>
</header>
{warnings}
<section class="plots">{render_sweep_curves(data)}{render_rungs(data, runs_url)}</section>
<section class="table-wrap">{table}</section>
</body></html>
"""


def runs_url_of(root: str, dag_id: str, dag_run_id: str) -> str:
    """The comparison page of one DAG run (``?task_id=...`` picks the task)."""
    return f"{root}/compare/{quote(dag_id, safe='')}/{quote(dag_run_id, safe='')}"
