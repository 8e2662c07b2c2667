"""Every code block in docs/ and the README is checked: what it shows is what the code accepts.

- ``python``: compiled, and every module and name it imports exists. A block that builds a DAG or
  an operator is a DAG file: Airflow's DagBag parses it (all of them in one process) and it must
  build at least one DAG, each with tasks. A block that is deliberately a piece of a DAG file says
  so on the line before its fence with ``<!-- snippet: partial -->``: it is compiled and its imports
  checked, nothing more; so is a section included from a file the tests run whole
  (``--8<-- "dags/x.py:train"``). Included blocks are expanded first.
- ``json``: parsed (a partial one may abridge with ``...``); one with a ``scheduler`` key is a
  ``torchx`` connection's extra and is checked as one.
- ``bash``: every ``AIRFLOW_CONN_*`` is a connection the provider accepts (a ``torchx`` one's run
  options checked against its scheduler), every ``AIRFLOW__TORCHX__*`` a ``[torchx]`` option, every
  ``make`` target, pytest path, pip extra and ``torchx-airflow-tracker`` command exists.
- ``ini``: every key of a ``[torchx]`` section is an option. ``yaml``: parsed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

PARTIAL = "<!-- snippet: partial -->"
FENCE = re.compile(r"^( *)```(\w+)[^\n]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
INCLUDE = re.compile(r'^--8<-- "([^":]+)(?::(\w+))?"$', re.M)
# what makes a python block a DAG file (or a piece of one)
BUILDS = re.compile(r"\bDAG\(|@dag\b|Operator\(|Sensor\(|@task\b")
# imported only to find them: loading torch costs more than the whole check
FIND_ONLY = {"torch"}


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    lang: str
    text: str
    partial: bool

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _included(match: re.Match[str]) -> str:
    path, section = match.group(1), match.group(2)
    text = (REPO / path).read_text()
    if section:
        text = text.split(f"--8<-- [start:{section}]", 1)[1].split("\n", 1)[1]
        text = textwrap.dedent(text.split(f"--8<-- [end:{section}]", 1)[0].rsplit("\n", 1)[0])
    return text


def snippets() -> list[Snippet]:
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text()
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip().rsplit("\n", 1)[-1].strip()
            body = "\n".join(line[len(match.group(1)) :] for line in match.group(3).splitlines())
            found.append(
                Snippet(
                    page=str(page.relative_to(REPO)),
                    line=text[: match.start()].count("\n") + 1,
                    lang=match.group(2),
                    text=INCLUDE.sub(_included, body),
                    # a section of a file (`--8<-- "dags/x.py:train"`) is a piece of a file the
                    # tests run whole (tests/integration/test_docs_dags.py)
                    partial=before == PARTIAL or bool(re.search(r'^--8<-- "[^"]+:\w+"$', body, re.M)),
                )
            )
    return found


SNIPPETS = snippets()


def of(lang: str) -> list[Snippet]:
    return [snippet for snippet in SNIPPETS if snippet.lang == lang]


def test_the_docs_have_snippets_of_every_kind_this_checks():
    kinds = {snippet.lang for snippet in SNIPPETS}
    assert {"python", "json", "bash", "yaml", "ini"} <= kinds  # an empty parametrization would skip
    unknown = kinds - {"python", "json", "bash", "yaml", "ini", "text", "mermaid"}
    assert not unknown, f"code blocks of a language nothing checks: {unknown}"


@pytest.mark.parametrize("snippet", of("python"), ids=lambda s: s.where)
def test_a_python_block_compiles_and_what_it_imports_exists(snippet: Snippet):
    tree = compile(snippet.text, snippet.where, "exec", flags=ast.PyCF_ONLY_AST)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                _find(alias.name, snippet)
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = _find(node.module, snippet)
            for alias in node.names:
                if module is not None and not hasattr(module, alias.name):
                    _find(f"{node.module}.{alias.name}", snippet)  # a submodule


def _find(name: str, snippet: Snippet):
    if name.split(".")[0] in FIND_ONLY:
        assert importlib.util.find_spec(name.split(".")[0]), f"{snippet.where}: no module {name!r}"
        return None
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.fail(f"{snippet.where}: imports {name!r}, which does not exist: {e}")


def dag_snippets() -> list[Snippet]:
    return [s for s in of("python") if not s.partial and BUILDS.search(s.text)]


def test_every_dag_block_parses_in_a_dagbag_and_builds_dags_with_tasks(tmp_path: Path):
    """What the scheduler's DAG processor does with the file a reader copies from the page."""
    dags = tmp_path / "dags"
    dags.mkdir()
    names = {}
    for number, snippet in enumerate(dag_snippets()):
        # a block that is no whole DAG file fails here, naming the fix
        assert re.search(r"\bDAG\(|@dag\b", snippet.text), (
            f"{snippet.where} builds operators but no DAG: make it a whole DAG file, or put "
            f"{PARTIAL} on the line before its fence"
        )
        (dags / f"snippet_{number}.py").write_text(snippet.text)
        names[f"snippet_{number}.py"] = snippet.where
    assert len(names) >= 4, "the DAG blocks of the docs were not found"
    script = (
        "import json, os\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(dags)!r})\n"
        "print(json.dumps({'errors': {os.path.basename(k): str(v) for k, v in bag.import_errors.items()},"
        " 'dags': {d.dag_id: [os.path.basename(d.fileloc), len(d.tasks)] for d in bag.dags.values()}}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not report["errors"], {names[file]: error for file, error in report["errors"].items()}
    built = {file for file, _tasks in report["dags"].values()}
    assert built == set(names), f"blocks that build no DAG: {[names[f] for f in set(names) - built]}"
    empty = [dag_id for dag_id, (_file, tasks) in report["dags"].items() if tasks == 0]
    assert not empty, f"DAGs without tasks: {empty}"


def _json(snippet: Snippet):
    text = snippet.text
    if snippet.partial:  # an abridged block: its `...` stand for members left out
        text = re.sub(r",\s*\.\.\.(?=\s*[\]}])", "", text)
        text = re.sub(r"\.\.\.\s*,", "", text)
    return json.loads(text)


@pytest.mark.parametrize("snippet", of("json"), ids=lambda s: s.where)
def test_a_json_block_parses_and_a_connection_extra_is_accepted(snippet: Snippet, monkeypatch):
    value = _json(snippet)
    if isinstance(value, dict) and "scheduler" in value:
        _check_torchx_connection("docs_snippet", value, monkeypatch)


def _check_torchx_connection(conn_id: str, extra: dict, monkeypatch) -> None:
    from torchx_airflow.hooks.torchx import TorchXHook

    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "torchx", "extra": extra}))
    hook = TorchXHook(torchx_conn_id=conn_id)
    scheduler = hook.check_scheduler(hook.scheduler)
    hook.resolve_cfg(scheduler, hook.cfg)  # unknown run options and bad values raise


def _connections(text: str) -> list[tuple[str, str]]:
    """``(conn_id, json)`` of each ``AIRFLOW_CONN_<ID>='...'`` (one may span lines)."""
    return [(m.group(1).lower(), m.group(2)) for m in re.finditer(r"AIRFLOW_CONN_(\w+)='(.*?)'", text, re.S)]


BASH = of("bash")


def test_the_bash_blocks_define_connections():
    assert any(_connections(snippet.text) for snippet in BASH)


@pytest.mark.parametrize("snippet", BASH, ids=lambda s: s.where)
def test_a_bash_block_names_connections_options_and_commands_that_exist(snippet: Snippet, monkeypatch):
    from torchx_airflow.settings.options import BY_NAME

    for conn_id, text in _connections(snippet.text):
        connection = json.loads(text)
        assert connection["conn_type"] in ("torchx", "torchx_fsspec", "mlflow"), snippet.where
        if connection["conn_type"] == "torchx":
            _check_torchx_connection(conn_id, connection.get("extra", {}), monkeypatch)
    for option in re.findall(r"AIRFLOW__TORCHX__(\w+)", snippet.text):
        assert option.lower() in BY_NAME, f"{snippet.where}: no [torchx] option {option.lower()!r}"
    for target in re.findall(r"^\s*(?:\w+=\S+ )*make (\w[\w-]*)", snippet.text, re.M):
        assert re.search(rf"^{re.escape(target)}:", MAKEFILE, re.M), (
            f"{snippet.where}: no make target {target!r}"
        )
    for command in re.findall(r"-m pytest ([^#\n]*)", snippet.text):
        for path in re.findall(r"(tests/\S+?)(?:::\S*)?(?=\s|$)", command):
            assert (REPO / path).exists(), f"{snippet.where}: {path} does not exist"
    for package, extras in re.findall(r"'(torchx-airflow(?:-tracker)?)\[([\w,$\-{}]+)\]'", snippet.text):
        known = EXTRAS[package]
        for extra in extras.split(","):
            assert extra.startswith("$") or extra in known, (
                f"{snippet.where}: {package} has no extra {extra!r}"
            )
    for command in re.findall(r"torchx-airflow-tracker (?:--\w+ \S+ )*([a-z]+)", snippet.text):
        assert command in TRACKER_COMMANDS, f"{snippet.where}: torchx-airflow-tracker has no {command!r}"


MAKEFILE = (REPO / "Makefile").read_text()
# the extras of both distributions, as installed (the editable installs of this checkout)
EXTRAS = {
    name: set(importlib.metadata.metadata(name).get_all("Provides-Extra") or ())
    for name in ("torchx-airflow", "torchx-airflow-tracker")
}


def _tracker_commands() -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "torchx_airflow_tracker", "--help"], capture_output=True, text=True, timeout=60
    )
    match = re.search(r"\{([\w,]+)\}", proc.stdout)
    return set(match.group(1).split(",")) if match else set()


TRACKER_COMMANDS = _tracker_commands()


@pytest.mark.parametrize("snippet", of("yaml"), ids=lambda s: s.where)
def test_a_yaml_block_parses(snippet: Snippet):
    import yaml

    assert list(yaml.safe_load_all(snippet.text))


@pytest.mark.parametrize("snippet", of("ini"), ids=lambda s: s.where)
def test_an_ini_block_sets_only_torchx_options_that_exist(snippet: Snippet):
    import configparser

    from torchx_airflow.settings.options import BY_NAME

    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(snippet.text)
    for key in parser["torchx"] if parser.has_section("torchx") else []:
        assert key in BY_NAME, f"{snippet.where}: no [torchx] option {key!r}"
