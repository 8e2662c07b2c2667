"""The lineage view drawn from a real fsspec store: every text a job or a DAG author controls is
escaped wherever it lands (element text, attributes, the header, the depth form, warnings), links open
only what a page may open, and the layout keeps sources left of their runs, cycles included."""

from __future__ import annotations

import re

import pytest

from torchx_airflow.plugins.graph import AirflowTask, Edge, LineageGraph, RunNode, Seed, build_graph
from torchx_airflow.plugins.render import (
    ART_GAP,
    ART_H,
    CARD_H,
    CARD_W,
    layout,
    render_error,
    render_page,
    render_svg,
)

XSS = '"><script>alert(1)</script>'
PARENT, CHILD = f"local_cwd://torchx/data{XSS}", "slurm://torchx/7"


def _page(graph: LineageGraph, **kwargs: object) -> str:
    args: dict = {"dag_id": "d", "run_id": "r", "static_url": "/s", "json_url": "/j", **kwargs}
    return render_page(graph, **args)


def _scripts(page: str) -> list[str]:
    """Every element the page would run as script, and every attribute that would run script."""
    return re.findall(r"<script[^>]*>", page) + re.findall(r"\son\w+\s*=", page)


@pytest.fixture
def hostile(job) -> None:
    """Runs whose ids, artifact names and paths, and Airflow identity carry markup."""
    job(PARENT, artifacts={f"model{XSS}": f"/m/{XSS}.pt"}, airflow_dag_id=f"dag{XSS}",
        airflow_run_id=f"run{XSS}", airflow_task_id=f"task{XSS}")  # fmt: skip
    job(CHILD, sources={PARENT: f"model{XSS}"})


def test_hostile_text_from_the_store_is_escaped_everywhere_it_is_drawn(store, hostile):
    seed = Seed(CHILD, AirflowTask(f"d{XSS}", f"r{XSS}", f"t{XSS}", state="success"), "SUCCEEDED")
    graph = build_graph([(store, [seed])], depth=2)
    graph.warnings.append(f"store said {XSS}")
    page = _page(
        graph,
        dag_id=f"d{XSS}",
        run_id=f"r{XSS}",
        keep={f"k{XSS}": f"v{XSS}"},
        warnings=graph.warnings,
        trackers=[f"conn{XSS}"],
    )
    assert _scripts(page) == ['<script src="/s/lineage.js">', " onchange="]  # the view's own only
    assert "<script>alert" not in page
    assert page.count("&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;") >= 8
    assert f'data-run="{PARENT}"' not in page  # an id must not close its attribute
    assert 'data-source="local_cwd://torchx/data&quot;&gt;&lt;script&gt;' in page


def test_nothing_a_job_writes_can_end_an_attribute_or_open_an_element(store, hostile):
    svg = render_svg(build_graph([(store, [Seed(CHILD)])], depth=2))
    # outside the quoted attribute values, no "<" or ">" but the drawing's own tags
    without_values = re.sub(r'"[^"]*"', '""', svg)
    tags = set(re.findall(r"</?([a-zA-Z]+)", without_values))
    assert tags <= {"svg", "defs", "marker", "path", "g", "title", "rect", "text", "a"}
    assert "script" not in without_values.replace("&lt;script&gt;", "").replace("&lt;/script&gt;", "")


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        " javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "file:///var/log/airflow",
        "//evil.example/x",
        "/\\evil.example/x",
        "/\n/evil.example",
        "vbscript:msgbox(1)",
    ],
)
def test_a_link_a_page_must_not_open_is_not_drawn_as_a_link(url):
    node = RunNode("slurm://torchx/1", links={"airflow": url, "scheduler_ui": url, "mlflow": url})
    svg = render_svg(LineageGraph({node.run_id: node}, [], depth=1))
    assert "<a " not in svg and "href" not in svg


def test_links_to_other_sites_open_in_a_new_tab_without_user_info_and_escaped():
    links = {"mlflow": 'https://bob:pw@mlflow.example/#/runs/1"onclick="x', "airflow": "/dags/d/runs/r"}
    node = RunNode("slurm://torchx/1", links=links)
    svg = render_svg(LineageGraph({node.run_id: node}, [], depth=1))
    assert 'href="https://mlflow.example/#/runs/1&quot;onclick=&quot;x" target="_blank"' in svg
    assert 'rel="noopener noreferrer"' in svg and "bob" not in svg and "pw@" not in svg
    assert 'href="/dags/d/runs/r" target="_top"' in svg
    assert _scripts(svg) == []


def test_sources_sit_left_of_their_runs_and_an_edge_starts_at_its_artifact(store, job):
    job("slurm://torchx/a", artifacts={"ckpt": "/c", "model": "/m"})
    job("slurm://torchx/b", sources={"slurm://torchx/a": "model"})
    job("slurm://torchx/c", sources={"slurm://torchx/b": None, "slurm://torchx/a": "ckpt"})
    graph = build_graph([(store, [Seed("slurm://torchx/b")])], depth=2)
    placed, width, _ = layout(graph)
    xs = {run_id[-1]: p.x for run_id, p in placed.items()}
    assert xs["a"] < xs["b"] < xs["c"]  # c sits right of its latest source b, not of a
    assert width >= 3 * CARD_W
    svg = render_svg(graph)
    edge = re.search(
        r'data-source="slurm://torchx/a" data-target="slurm://torchx/b"><path d="M(\d+) (\d+)', svg
    )
    assert edge is not None
    a = placed["slurm://torchx/a"]
    model = a.y + CARD_H + ART_GAP + (ART_H + ART_GAP) + ART_H / 2  # the second artifact under a's card
    assert (int(edge[1]), int(edge[2])) == (round(a.x + CARD_W), round(model))
    assert ">model<" in svg  # the edge's label names its artifact


def test_a_cycle_in_the_store_is_drawn_with_every_run_placed(store, job):
    job("slurm://torchx/a", sources={"slurm://torchx/b": None})
    job("slurm://torchx/b", sources={"slurm://torchx/a": None})
    job("slurm://torchx/c", sources={"slurm://torchx/c": None})  # its own source
    job("slurm://torchx/d", sources={"slurm://torchx/a": None})
    graph = build_graph([(store, [Seed("slurm://torchx/a"), Seed("slurm://torchx/c")])], depth=3)
    placed, _, _ = layout(graph)
    assert set(placed) == set(graph.runs) == {f"slurm://torchx/{x}" for x in "abcd"}
    positions = {(p.x, p.y) for p in placed.values()}
    assert len(positions) == 4  # no two cards on top of each other
    assert render_svg(graph).count('class="edge"') == len(graph.edges) == 4


def test_an_edge_to_a_run_not_drawn_is_left_out():
    node = RunNode("slurm://torchx/1")
    graph = LineageGraph({node.run_id: node}, [Edge("slurm://torchx/0", node.run_id, ("m",))], depth=1)
    assert 'class="edge"' not in render_svg(graph)


def test_the_header_counts_what_is_drawn_and_what_is_not(store, job):
    job("slurm://torchx/a", artifacts={"model": "/m"})
    job("slurm://torchx/b", sources={"slurm://torchx/a": "model"})
    job("slurm://torchx/c", sources={"slurm://torchx/b": None})
    graph = build_graph([(store, [Seed("slurm://torchx/b")])], depth=1, max_runs=2)
    page = _page(graph, trackers=["fs"])
    assert "1 run in this DAG run · 1 from another DAG run · 1 artifact · 1 edge" in page
    assert "1 not drawn (at most 2)" in page and "trackers: fs" in page
    assert 'class="warning cut"' in page


def test_a_dag_run_without_tracked_runs_says_how_to_get_them():
    page = _page(LineageGraph({}, [], depth=3))
    assert "No tracked runs in this DAG run yet" in page and "<svg" not in page
    assert '<option value="3" selected>3</option>' in page


def test_an_error_page_escapes_its_detail():
    page = render_error(404, f"DAG run {XSS} does not exist", "/s")
    assert "There is no such DAG run." in page
    assert _scripts(page) == [] and "&lt;script&gt;" in page
