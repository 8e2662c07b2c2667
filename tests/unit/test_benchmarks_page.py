"""docs/benchmarks.md is exactly what bench/run.py renders from bench/results.json, which only the
benchmarks write: a figure edited or merged into the page by hand fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.run import DEFAULT_OUTPUT, DEFAULT_RESULTS, check, read_results, render


def test_the_benchmarks_page_is_rendered_from_the_results_of_the_bench():
    assert check(DEFAULT_RESULTS, DEFAULT_OUTPUT) is None


def test_every_module_of_the_bench_has_its_results_in_the_page():
    """One `make bench` run wrote every module: none missing, none kept from an older layout."""
    modules = read_results(DEFAULT_RESULTS)["modules"]
    bench_modules = {p.stem.removeprefix("bench_") for p in DEFAULT_RESULTS.parent.glob("bench_*.py")}
    assert set(modules) == bench_modules
    page = DEFAULT_OUTPUT.read_text()
    for name, module in modules.items():
        for row in module["rows"]:
            assert f"| {name} | {row['figure']} |" in page


def test_a_figure_edited_by_hand_in_the_page_is_found(tmp_path: Path):
    page, results = tmp_path / "benchmarks.md", tmp_path / "results.json"
    shutil.copy(DEFAULT_RESULTS, results)
    page.write_text(render(read_results(results)))
    assert check(results, page) is None
    lines = page.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("| cache |"))
    cells = lines[row].split(" | ")
    cells[4] = "0.01"  # a better ratio typed in
    lines[row] = " | ".join(cells)
    page.write_text("\n".join(lines) + "\n")
    assert "run `python bench/run.py --render`" in (check(results, page) or "")
