"""``make bench``: run every ``bench/bench_*.py``, keep their figures in bench/results.json and
write docs/benchmarks.md from it.

    python bench/run.py                      # all benchmarks: the results file holds this run only
    python bench/run.py tracker              # only bench/bench_tracker.py: its results replaced, the
                                             # other modules' kept from the results file
    python bench/run.py --check              # does docs/benchmarks.md say what the results say?
    python bench/run.py --render             # write docs/benchmarks.md from the results again
    python bench/run.py --output /tmp/b.md --results /tmp/r.json   # somewhere else

The page is only ever rendered from the results file, which only the benchmarks write: no figure in
it is merged by hand, and a unit test fails when the page and the results disagree.

Each module exposes ``run() -> list[dict]`` (rows in the format of ``bench.common.figure``). A module
that raises, or returns rows without the expected fields, becomes one row carrying its error; the
other modules still run and the table is still written.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import FIELDS, Figure, error_row  # noqa: E402

BENCH_DIR = REPO / "bench"
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks.md"
DEFAULT_RESULTS = BENCH_DIR / "results.json"


def discover(only: list[str]) -> list[Path]:
    paths = sorted(BENCH_DIR.glob("bench_*.py"))
    if only:
        paths = [p for p in paths if p.stem.removeprefix("bench_") in only or p.stem in only]
    return paths


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench.{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_module(path: Path) -> tuple[list[Figure], float]:
    """The rows of one benchmark module and its wall time; an error row if it fails."""
    start = time.monotonic()
    try:
        rows = list(_load(path).run())
        for row in rows:
            missing = [f for f in FIELDS if f not in row]
            if missing:
                raise ValueError(f"row {row.get('figure')!r} lacks {missing}")
    except Exception as e:  # a failing benchmark is reported, not fatal
        traceback.print_exc()
        rows = [error_row(path.stem, e)]
    return rows, time.monotonic() - start


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    memory = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    return {
        "cores": str(os.cpu_count()),
        "memory": memory,
        "cpu": cpu,
        "load average (1 min, at start)": f"{os.getloadavg()[0]:.1f}",
        "os": platform.platform(),
        "python": platform.python_version(),
        "torchx": _version("torchx"),
        "apache-airflow": _version("apache-airflow"),
        "mlflow": _version("mlflow-skinny") if _version("mlflow") == "not installed" else _version("mlflow"),
        "fsspec": _version("fsspec"),
    }


def _number(value: float, unit: str) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if unit == "s":
        return f"{value * 1000:.2f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:.4g} {unit}".strip()


TABLE_HEADER = (
    "| module | figure | baseline | target | ratio | median | baseline median | meets target | note |"
)


def _row_line(module: str, row: Figure) -> str:
    ratio = row["ratio"]
    ratio_text = "-" if isinstance(ratio, float) and math.isnan(ratio) else f"{ratio:.3g}"
    cells = [
        module,
        row["figure"],
        row["baseline"],
        row["target"],
        ratio_text,
        _number(row["value"], row["unit"]),
        _number(row["baseline_value"], row["unit"]),
        "yes" if row["meets_target"] else "**no**",
        row["note"],
    ]
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def render(results: dict[str, Any]) -> str:
    """docs/benchmarks.md from the results file: every row as the bench printed it, nothing else.

    ``results``: ``{"modules": {name: {"rows": [...], "seconds": s, "run_at": date, "machine": {...}}}}``.
    """
    modules = results["modules"]
    latest = max(modules, key=lambda name: modules[name]["run_at"])
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`bench/run.py`) from `bench/results.json`; do not edit by hand",
        "(`python bench/run.py --check` and the unit tests compare the two). Each figure is measured",
        "against its baseline in the same run (repetitions interleaved, medians). `ratio` = figure /",
        "baseline. A run of some modules (`make bench BENCH_ARGS=tracker`) replaces their results and",
        "keeps the others' (the last table says when each module ran, and on what load).",
        "",
        f"Date: {modules[latest]['run_at']}",
        "",
        TABLE_HEADER,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in sorted(modules):
        lines += [_row_line(name, row) for row in modules[name]["rows"]]
    lines += ["", f"## Machine (of the latest run, {latest})", "", "| | |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in modules[latest]["machine"].items()]
    lines += ["", "## Time per benchmark module", ""]
    lines += ["| module | wall time | run at | load average at start |", "| --- | --- | --- | --- |"]
    for name in sorted(modules):
        module = modules[name]
        load = module["machine"].get("load average (1 min, at start)", "-")
        lines.append(f"| {name} | {module['seconds']:.0f} s | {module['run_at']} | {load} |")
    return "\n".join(lines) + "\n"


def read_results(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"modules": {}}


def write_results(path: Path, results: dict[str, Any]) -> None:
    # NaN (a failed module's figures) is kept as JSON's NaN extension, which json reads back
    path.write_text(json.dumps(results, indent=1) + "\n")


def check(results_path: Path, output: Path) -> str | None:
    """Why ``output`` is not what ``results_path`` renders to, or None when it is."""
    if not results_path.exists():
        return f"{results_path} is missing: run `make bench`"
    expected = render(read_results(results_path))
    if not output.exists() or output.read_text() != expected:
        return f"{output} is not what {results_path} renders to: run `python bench/run.py --render`"
    return None


def run_modules(only: list[str], results: dict[str, Any], results_path: Path) -> dict[str, Any]:
    """Run the modules named (all when none), each one's results replacing its last ones."""
    paths = discover(only)
    if not paths:
        raise SystemExit(f"No benchmark matches {only!r} in {BENCH_DIR} (files are bench_<name>.py).")
    if not only:
        results = {"modules": {}}  # a whole run keeps nothing of the last one
    for path in paths:
        print(f"running {path.name}", flush=True)
        info = machine()
        run_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        rows, seconds = run_module(path)
        for row in rows:
            print(f"  {row['figure']}: ratio {row['ratio']:.3g} meets={row['meets_target']} {row['note']}")
        name = path.stem.removeprefix("bench_")
        results["modules"][name] = {"rows": rows, "seconds": seconds, "run_at": run_at, "machine": info}
        results_path.parent.mkdir(parents=True, exist_ok=True)
        write_results(results_path, results)  # each module's figures kept as soon as it ends
    return results


def main(argv: list[str] | None = None) -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("only", nargs="*", help="benchmark names (bench_<name>.py) to run; default all")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--check", action="store_true", help="only compare the page with the results")
    parser.add_argument("--render", action="store_true", help="only write the page from the results")
    args = parser.parse_args(argv)
    if args.check:
        problem = check(args.results, args.output)
        print(problem or f"{args.output} matches {args.results}")
        return 1 if problem else 0
    results = read_results(args.results)
    if not args.render:
        results = run_modules(args.only, results, args.results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(results))
    print(f"wrote {args.output} from {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
