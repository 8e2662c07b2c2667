"""The lineage graph drawn as SVG on the server: no JavaScript library, no CDN, nothing to build.

Runs are laid out in layers (a run sits one column right of its latest source), ordered inside a
column by the barycenter of their neighbours to keep edges from crossing; a run's artifacts hang
under its card. Every text is escaped; every link to another site opens in a new tab. The caller
hands in texts already masked (secrets, URL user info): masking after escaping would miss a secret
holding ``& < > "``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass

from torchx_airflow.plugins.graph import HIDDEN_LABEL, Edge, LineageGraph, RunNode
from torchx_airflow.plugins.text import link_target, strip_userinfo
from torchx_airflow.plugins.usage_view import total_text

CARD_W, CARD_H = 290, 112
ART_H, ART_GAP, ART_INDENT = 40, 8, 26
GAP_X, GAP_Y, PAD = 90, 26, 24
SWEEPS = 4
STATE_CLASS = {
    "SUCCEEDED": "st-ok",
    "success": "st-ok",
    "FAILED": "st-bad",
    "failed": "st-bad",
    "upstream_failed": "st-bad",
    "CANCELLED": "st-bad",
    "RUNNING": "st-run",
    "running": "st-run",
    "PENDING": "st-run",
    "SUBMITTED": "st-run",
    "queued": "st-run",
    "deferred": "st-run",
    "scheduled": "st-run",
    "skipped": "st-skip",
}
LINK_NAMES = {"airflow": "Task", "scheduler_ui": "Scheduler UI", "mlflow": "MLflow run"}


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _fit(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(1, chars - 1)] + "…"


def _fit_middle(text: str, chars: int) -> str:
    """Paths and handles end in what tells them apart (file name, app id): keep both ends."""
    if len(text) <= chars:
        return text
    tail = (chars - 1) * 3 // 5
    return text[: chars - 1 - tail] + "…" + text[-tail:]


@dataclass
class Placed:
    """Where a run's card (and its artifacts under it) sits."""

    node: RunNode
    x: float
    y: float


def block_height(node: RunNode) -> float:
    """The height of a run's card with its artifacts under it."""
    return CARD_H + len(node.artifacts) * (ART_H + ART_GAP)


def _layers(graph: LineageGraph) -> dict[str, int]:
    """Longest path from the roots (Kahn's order); runs on a cycle go one column right of the rest."""
    preds: dict[str, set[str]] = {run_id: set() for run_id in graph.runs}
    succs: dict[str, set[str]] = {run_id: set() for run_id in graph.runs}
    for edge in graph.edges:
        if edge.source in preds and edge.target in preds and edge.source != edge.target:
            preds[edge.target].add(edge.source)
            succs[edge.source].add(edge.target)
    waiting = {run_id: len(p) for run_id, p in preds.items()}
    ready = sorted(run_id for run_id, count in waiting.items() if count == 0)
    layer: dict[str, int] = {}
    while ready:
        run_id = ready.pop()
        layer[run_id] = max((layer[p] + 1 for p in preds[run_id]), default=0)
        for child in succs[run_id]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    last = max(layer.values(), default=-1)
    for run_id in graph.runs:
        layer.setdefault(run_id, last + 1)
    return layer


def _order(graph: LineageGraph, layer: dict[str, int]) -> list[list[str]]:
    """Runs per column, ordered by the barycenter heuristic (a few sweeps left-right and back)."""
    columns: list[list[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for run_id in sorted(graph.runs, key=lambda r: (graph.runs[r].label, r)):
        columns[layer[run_id]].append(run_id)
    neighbours: dict[str, list[str]] = {run_id: [] for run_id in graph.runs}
    for edge in graph.edges:
        if edge.source in neighbours and edge.target in neighbours:
            neighbours[edge.source].append(edge.target)
            neighbours[edge.target].append(edge.source)
    position = {run_id: i for column in columns for i, run_id in enumerate(column)}

    def barycenter(run_id: str) -> float:
        near = [position[n] for n in neighbours[run_id] if layer[n] != layer[run_id]]
        return sum(near) / len(near) if near else position[run_id]

    for sweep in range(SWEEPS):
        for column in columns[1:] if sweep % 2 == 0 else columns[-2::-1]:
            column.sort(key=barycenter)
            position.update({run_id: i for i, run_id in enumerate(column)})
    return columns


def layout(graph: LineageGraph) -> tuple[dict[str, Placed], float, float]:
    """Card positions and the drawing's width and height."""
    columns = _order(graph, _layers(graph))
    heights = [
        sum(block_height(graph.runs[r]) for r in col) + GAP_Y * max(0, len(col) - 1) for col in columns
    ]
    tallest = max(heights, default=0)
    placed: dict[str, Placed] = {}
    for index, (column, height) in enumerate(zip(columns, heights, strict=True)):
        x, y = PAD + index * (CARD_W + GAP_X), PAD + (tallest - height) / 2
        for run_id in column:
            placed[run_id] = Placed(graph.runs[run_id], x, y)
            y += block_height(graph.runs[run_id]) + GAP_Y
    width = PAD * 2 + len(columns) * CARD_W + max(0, len(columns) - 1) * GAP_X
    return placed, max(width, CARD_W + 2 * PAD), tallest + 2 * PAD


def _links(links: dict[str, str], x: float, y: float) -> str:
    """The run's links in a row; only http(s) and Airflow's own pages (file:// log directories and
    the like cannot be opened from a page)."""
    parts = []
    for key, name in LINK_NAMES.items():
        url = strip_userinfo(links.get(key, ""))
        target = link_target(url)
        if target is None:
            continue
        parts.append(
            f'<a href="{_esc(url)}" target="{target}" rel="noopener noreferrer" class="lnk">'
            f'<text x="{x:.0f}" y="{y:.0f}">{_esc(name)} ↗</text></a>'
        )
        x += 7.4 * len(name) + 30
    return "".join(parts)


def _card(p: Placed, selected: bool) -> str:
    node, x, y = p.node, p.x, p.y
    state = node.state or "unknown"
    classes = ["run", STATE_CLASS.get(state, "st-none")]
    classes += ["seed"] if node.in_dag_run else ["other"]
    classes += ["selected"] if selected else []
    classes += ["hidden"] if node.hidden else []
    classes += ["cached"] if node.cached_from and not node.hidden else []
    if node.hidden:
        where = HIDDEN_LABEL
    elif node.in_dag_run or node.task is None:
        where = f"{node.scheduler or 'tracked run'} · {node.app_name}" if node.handle else "Python task"
    else:
        where = f"{node.task.dag_id} · {node.task.run_id}"
    handle = "" if node.hidden else node.handle or node.run_id
    if node.cached_from and not node.hidden:
        handle = f"↺ cached from {node.cached_from}"
    label = "Hidden run" if node.hidden else node.label
    pill_w = 7.6 * len(state) + 16
    usage = node.usage.text() if node.usage is not None and not node.hidden else ""
    title = node.run_id
    if node.usage is not None and not node.hidden:
        title += f"\nusage ({node.usage.source}): {usage}"
    parts = [
        f'<g class="{" ".join(classes)}" data-run="{_esc(node.run_id)}" '
        f'transform="translate({x:.0f},{y:.0f})">',
        f"<title>{_esc(title)}</title>",
        f'<rect class="card" width="{CARD_W}" height="{CARD_H}" rx="10"/>',
        f'<rect class="bar" width="6" height="{CARD_H}" rx="3"/>',
        f'<text class="label" x="18" y="24">{_esc(_fit(label, 26))}</text>',
        f'<rect class="pill" x="{CARD_W - pill_w - 10}" y="9" width="{pill_w}" height="20" rx="10"/>',
        f'<text class="pilltext" x="{CARD_W - pill_w / 2 - 10}" y="23">{_esc(state)}</text>',
        f'<text class="where" x="18" y="45">{_esc(_fit_middle(where, 36))}</text>',
        f'<text class="handle" x="18" y="64">{_esc(_fit_middle(handle, 40))}</text>',
        f'<text class="usage" x="18" y="83">{_esc(_fit(usage, 42))}</text>' if usage else "",
        f'<g class="links">{_links(node.links, 18, 103)}</g>',
    ]
    ay = CARD_H + ART_GAP
    for artifact in node.artifacts:
        mid = ay + ART_H / 2
        parts += [
            f'<path class="artline" d="M12 {CARD_H} V{mid} H{ART_INDENT}"/>',
            f'<g class="artifact" transform="translate({ART_INDENT},{ay})">',
            f"<title>{_esc(artifact.name)}: {_esc(artifact.path)}</title>",
            f'<rect width="{CARD_W - ART_INDENT}" height="{ART_H}" rx="7"/>',
            f'<text class="aname" x="12" y="16">◆ {_esc(_fit(artifact.name, 34))}</text>',
            f'<text class="apath" x="12" y="32">{_esc(_fit_middle(artifact.path, 39))}</text>',
            "</g>",
        ]
        ay += ART_H + ART_GAP
    parts.append("</g>")
    return "".join(parts)


def _edge(edge: Edge, placed: dict[str, Placed]) -> str:
    source, target = placed.get(edge.source), placed.get(edge.target)
    if source is None or target is None:
        return ""
    sx, sy = source.x + CARD_W, source.y + CARD_H / 2
    names = [a.name for a in source.node.artifacts]
    for name in edge.artifact_names:  # an edge through a named artifact starts at that artifact
        if name in names:
            sx = source.x + CARD_W
            sy = source.y + CARD_H + ART_GAP + names.index(name) * (ART_H + ART_GAP) + ART_H / 2
            break
    tx, ty = target.x, target.y + CARD_H / 2
    bend = max(40.0, (tx - sx) / 2)
    path = f"M{sx:.0f} {sy:.0f} C{sx + bend:.0f} {sy:.0f} {tx - bend:.0f} {ty:.0f} {tx - 2:.0f} {ty:.0f}"
    label = ""
    if edge.artifact_names:
        text = _esc(_fit(", ".join(edge.artifact_names), 24))
        label = f'<text class="elabel" x="{(sx + tx) / 2:.0f}" y="{(sy + ty) / 2 - 6:.0f}">{text}</text>'
    return (
        f'<g class="edge" data-source="{_esc(edge.source)}" data-target="{_esc(edge.target)}">'
        f'<path d="{path}" marker-end="url(#arrow)"/>{label}</g>'
    )


def render_svg(graph: LineageGraph, selected: Iterable[str] = ()) -> str:
    """The graph as one ``<svg>`` element; ``selected`` run ids get a highlighted outline."""
    placed, width, height = layout(graph)
    chosen = set(selected)
    edges = "".join(_edge(edge, placed) for edge in graph.edges)
    cards = "".join(_card(p, p.node.run_id in chosen) for p in placed.values())
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="TorchX lineage graph">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" class="arrowhead"/></marker></defs>'
        f'<g class="edges">{edges}</g><g class="runs">{cards}</g></svg>'
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _stats(graph: LineageGraph) -> str:
    runs = list(graph.runs.values())
    own = sum(run.in_dag_run for run in runs)
    others = len(runs) - own
    parts = [
        f"{_count(own, 'run')} in this DAG run",
        "1 from another DAG run" if others == 1 else f"{others} from other DAG runs",
        _count(len(graph.artifacts), "artifact"),
        _count(len(graph.edges), "edge"),
    ]
    hidden = sum(run.hidden for run in runs)
    if hidden:
        parts.append(f"{hidden} in DAGs you cannot see")
    if graph.truncated:
        parts.append("more beyond this depth")
    if graph.runs_not_shown:
        parts.append(f"{graph.runs_not_shown} not drawn (at most {graph.max_runs})")
    return " · ".join(parts)


def render_page(
    graph: LineageGraph,
    *,
    dag_id: str,
    run_id: str,
    static_url: str,
    json_url: str,
    selected: Iterable[str] = (),
    trackers: Iterable[str] = (),
    keep: dict[str, str] | None = None,
    warnings: Iterable[str] = (),
    max_depth: int = 10,
) -> str:
    """The whole view: a header (DAG run, depth, counts, legend) and the graph, or why there is none.

    ``keep`` holds the query parameters the depth form carries along (the selected task).
    """
    selected = list(selected)
    depth_options = "".join(
        f'<option value="{d}"{" selected" if d == graph.depth else ""}>{d}</option>'
        for d in range(1, max(max_depth, graph.depth) + 1)
    )
    if graph.runs:
        body = f'<div class="canvas" id="canvas">{render_svg(graph, selected)}</div>'
    else:
        body = (
            '<div class="empty"><h2>No tracked runs in this DAG run yet</h2><p>A TorchX task records its run '
            "when its app is submitted (XCom <code>torchx_run_id</code>); a Python task does with "
            "<code>task_app_run</code>. Tasks without tracker connections have no lineage.</p></div>"
        )
    tracker_text = ", ".join(trackers) or "none"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>TorchX lineage · {_esc(dag_id)} · {_esc(run_id)}</title>
<link rel="stylesheet" href="{_esc(static_url)}/lineage.css">
</head><body>
<header>
  <div class="title"><h1>TorchX lineage</h1>
    <span class="run-id">{_esc(dag_id)} · {_esc(run_id)}</span></div>
  <form class="controls" method="get">
    <label>Depth <select name="depth" onchange="this.form.submit()">{depth_options}</select></label>
    {"".join(f'<input type="hidden" name="{_esc(k)}" value="{_esc(v)}">' for k, v in (keep or {}).items())}
    <a class="json" href="{_esc(json_url)}" target="_blank" rel="noopener">JSON</a>
  </form>
  <div class="stats">{_esc(_stats(graph))} · trackers: {_esc(tracker_text)}</div>
  <div class="stats usage-total">{_esc(total_text(graph.usage_total))}</div>
  <div class="legend"><span class="key ok">succeeded</span><span class="key run">running</span>
    <span class="key bad">failed</span><span class="key seed-key">this DAG run</span>
    <span class="key cached-key">cached</span>
    <span class="key other-key">earlier DAG run or other DAG</span>
    <span class="key art-key">artifact</span></div>
</header>
{f'<div class="warning cut">{_esc(graph.cut)}</div>' if graph.cut else ""}
{"".join(f'<div class="warning">{_esc(w)}</div>' for w in warnings)}
{body}
<script src="{_esc(static_url)}/lineage.js"></script>
</body></html>
"""


ERROR_TEXT = {
    401: "Log in to Airflow to see this DAG run's lineage.",
    403: "You are not allowed to read this DAG's runs, so you cannot see their lineage.",
    404: "There is no such DAG run.",
}


def render_error(status: int, detail: str, static_url: str) -> str:
    """A page for the tab when the view cannot be shown (not logged in, no access, no such run)."""
    message = ERROR_TEXT.get(status, "The lineage view could not be shown.")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{status}</title>
<link rel="stylesheet" href="{_esc(static_url)}/lineage.css"></head>
<body><div class="empty"><h2>{status} · {_esc(message)}</h2><p>{_esc(detail)}</p></div></body></html>
"""
