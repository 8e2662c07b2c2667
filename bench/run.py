"""``make bench``: run every ``bench/bench_*.py`` and write docs/benchmarks.md.

    python bench/run.py                      # all benchmarks
    python bench/run.py tracker              # only bench/bench_tracker.py: its rows replaced, the
                                             # other modules' rows kept from the existing file
    python bench/run.py --output /tmp/b.md   # somewhere else

Each module exposes ``run() -> list[dict]`` (rows in the format of ``bench.common.figure``). A module
that raises, or returns rows without the expected fields, becomes one row carrying its error; the
other modules still run and the table is still written.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import math
import os
import platform
import re
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import FIELDS, Figure, error_row  # noqa: E402

BENCH_DIR = REPO / "bench"
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks.md"


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
TIMES_HEADER = "| module | wall time | run at |"
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in _CELL_SPLIT.split(line.strip())[1:-1]]


def kept_lines(previous: str, modules_run: set[str], new_figures: list[str]) -> tuple[list[str], list[str]]:
    """The figure rows and module-time rows of ``previous`` (a benchmarks.md) that modules not run
    this time wrote: a run of some modules replaces their rows and keeps the others'.

    Rows written before the table had a module column are attributed by name: one whose figure
    starts with the same two words as a figure of this run is this run's (replaced); the others are
    kept, with ``-`` as their module until their module runs again.
    """
    prefixes = {" ".join(name.split()[:2]) for name in new_figures}
    figures, times = [], []
    section = None
    for line in previous.splitlines():
        if line.startswith("| figure |") or line.startswith("| module | figure |"):
            section = "figures"
        elif line.startswith("| module | wall time"):
            section = "times"
        elif not line.startswith("|"):
            section = None if line.strip() else section
        elif section and not line.startswith("| ---"):
            cells = _cells(line)
            if section == "times" and cells and cells[0].removeprefix("bench_") not in modules_run:
                times.append(line if len(cells) == 3 else line.rstrip() + " - |")
            elif section == "figures" and len(cells) == 9 and cells[0] not in modules_run:
                figures.append(line)
            elif section == "figures" and len(cells) == 8:
                if " ".join(cells[0].split()[:2]) not in prefixes:
                    figures.append("| - " + line)
    return figures, times


def render(
    rows: list[tuple[str, Figure]],
    timings: dict[str, float],
    info: dict[str, str],
    date: str,
    kept: tuple[list[str], list[str]] = ([], []),
) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`bench/run.py`); do not edit by hand. Each figure is measured against",
        "its baseline in the same run (repetitions interleaved, medians). `ratio` = figure / baseline.",
        "A run of some modules (`make bench BENCH_ARGS=tracker`) replaces their rows and keeps the",
        "others' from the run that made them (the last table says when each module ran).",
        "",
        f"Date: {date}",
        "",
        TABLE_HEADER,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for module, row in rows:
        ratio = row["ratio"]
        ratio_text = "-" if isinstance(ratio, float) and math.isnan(ratio) else f"{ratio:.3g}"
        cells = [
            module.removeprefix("bench_"),
            row["figure"],
            row["baseline"],
            row["target"],
            ratio_text,
            _number(row["value"], row["unit"]),
            _number(row["baseline_value"], row["unit"]),
            "yes" if row["meets_target"] else "**no**",
            row["note"],
        ]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    lines += kept[0]
    lines += ["", "## Machine (of this run)", "", "| | |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in info.items()]
    lines += ["", "## Time per benchmark module", "", TIMES_HEADER, "| --- | --- | --- |"]
    lines += [f"| {name} | {seconds:.0f} s | {date} |" for name, seconds in timings.items()]
    lines += kept[1]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("only", nargs="*", help="benchmark names (bench_<name>.py) to run; default all")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    paths = discover(args.only)
    if not paths:
        raise SystemExit(f"No benchmark matches {args.only!r} in {BENCH_DIR} (files are bench_<name>.py).")
    info = machine()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows: list[tuple[str, Figure]] = []
    timings: dict[str, float] = {}
    for path in paths:
        print(f"running {path.name}", flush=True)
        module_rows, seconds = run_module(path)
        rows += [(path.stem, row) for row in module_rows]
        timings[path.stem] = seconds
        for row in module_rows:
            print(f"  {row['figure']}: ratio {row['ratio']:.3g} meets={row['meets_target']} {row['note']}")
    kept: tuple[list[str], list[str]] = ([], [])
    if args.only and args.output.exists():  # the other modules' rows stay
        modules_run = {p.stem.removeprefix("bench_") for p in paths}
        kept = kept_lines(args.output.read_text(), modules_run, [row["figure"] for _, row in rows])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(rows, timings, info, date, kept))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
