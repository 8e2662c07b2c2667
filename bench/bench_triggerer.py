"""Deferred waits at scale: N ``TorchXAppTrigger`` runs in one event loop, as the triggerer runs them,
waiting on N held Slurm jobs (``sbatch --hold``: nothing runs), on a private Slurm cluster started for
the bench (``scripts/slurm/cluster.sh up --private``; the shared one is never loaded or stopped).

Shared polling (one batched ``sacct`` per interval for every trigger of a process) against the
baseline of per-trigger polling (each trigger its own hook and status query per interval, as the
trigger did before), alternated: shared, per-trigger, shared; medians. Each run is a Python
process of its own, as a triggerer is: its CPU (``getrusage``: its threads, and its children, which
are only its query commands) is the waits' alone, not that of whatever ran before in the bench's
process (other modules' threads, children reaped late). Scheduler queries are counted at the
command level by shims first on PATH.

The outage: ``slurmctld`` and ``slurmdbd`` of that cluster stopped for ``BENCH_OUTAGE`` seconds under
the N waits; the waits that end before the controller is back and one more poll, against today's
shared poller (one batched query under the old 5-attempt policy, its error handed to every wait:
``_legacy_retrying``) in the same run.

Environment: ``BENCH_WAITS`` (default 5000), ``BENCH_INTERVAL`` (default 5 s), ``BENCH_ROUNDS``
(intervals per measurement, default 3), ``BENCH_OUTAGE`` (default 30 s).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import figure

CONN_ID = "torchx_bench_slurm"
QUERY_COMMANDS = ("sacct", "squeue", "scontrol")
#: Per-trigger polling's CPU per query is measured on this many waits: few enough that it polls each
#: of them every interval, every wait's hook built in the interval before the measured ones. With
#: thousands its query threads cannot keep up (a few dozen queries per interval), and nearly every
#: query in the window is a wait's first, which builds its hook (about 20 ms, six times a later one).
STEADY_WAITS = 50
# Airflow's triggerer warns when its watchdog's 0.1 s sleep takes over 0.2 s
# ([triggerer] blocked_main_thread_warning_threshold): 0.1 s late
LATE_WARNING = 0.1


def _shims(root: Path) -> Path:
    """Counting shims for Slurm's query commands; each call appends its name to ``calls``."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name in QUERY_COMMANDS:
        real = shutil.which(name)
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\necho {name} >> "{root}/calls"\nexec "{real}" "$@"\n')
        shim.chmod(0o755)
    return bin_dir


def _calls(root: Path) -> int:
    path = root / "calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _submit_held(count: int) -> list[str]:
    def one(_: int) -> str:
        out = subprocess.run(
            ["sbatch", "--parsable", "--hold", "-J", "torchx-bench-held", "-o", "/dev/null", "--wrap=true"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.strip().split(";")[0]

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(count)))


async def _lateness_probe(stop: asyncio.Event, period: float = 0.05) -> list[float]:
    """How late each of the loop's wake-ups every ``period`` came (seconds), until ``stop``."""
    samples = []
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(period)
        samples.append(time.perf_counter() - start - period)
    return samples


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98] if len(samples) > 1 else samples[0]


class FullCollections:
    """The pauses of CPython's full (generation 2) garbage collections while recording: each one
    holds the GIL, so it blocks the event loop whichever thread it runs in."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self.cpu: list[float] = []  # the same pauses in CPU time of the collecting thread
        self._started: tuple[float, float] | None = None

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = (time.perf_counter(), time.thread_time())
        elif self._started is not None:
            self.pauses.append(time.perf_counter() - self._started[0])
            self.cpu.append(time.thread_time() - self._started[1])
            self._started = None


_ANSWERS = [0]  # status answers the per-trigger waits got (one per query)


async def _per_trigger_wait(handle: str, interval: float) -> None:
    """The baseline: what one trigger did before shared polling (its own hook, its own query)."""
    from torchx_airflow.hooks.torchx import TorchXHook

    hook = TorchXHook(CONN_ID)
    try:
        while True:
            await asyncio.to_thread(hook.status, handle)
            _ANSWERS[0] += 1
            await asyncio.sleep(interval)
    finally:
        await asyncio.to_thread(hook.close)


async def _shared_wait(handle: str, interval: float) -> None:
    from torchx_airflow.triggers.torchx import TorchXAppTrigger

    async for _ in TorchXAppTrigger(handle, CONN_ID, poll_interval=interval).run():
        return


def _legacy_retrying(interval: float) -> Any:
    """The status policy before outages were waited out: 5 attempts, 0.5 s doubling up to
    ``interval`` apart, then the error."""
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    from torchx_airflow.retry import is_retryable

    return Retrying(
        stop=stop_after_attempt(5),
        wait=wait_exponential(multiplier=0.5, min=0.5, max=max(0.5, interval)),
        retry=retry_if_exception(is_retryable),
        reraise=True,
    )


async def _legacy_shared_waits(handles: list[str], interval: float) -> None:
    """Today's shared poller: one batched query per interval (today's Slurm query: ``sacct``, which
    fails the whole batch while accounting is down) under the 5-attempt policy; when the policy gives
    up, every waiting trigger ends with that error (returns then)."""
    from torchx_airflow.schedulers.slurm import job_row, sacct_records

    def sacct_rows(ids: list[str]) -> list:
        return [job_row(record) for record in sacct_records(ids)]

    job_ids = [handle.rsplit("/", 1)[1] for handle in handles]
    while True:
        retrying = _legacy_retrying(interval)
        try:
            await asyncio.to_thread(retrying, sacct_rows, job_ids)
        except Exception:
            return
        await asyncio.sleep(interval)


async def _outage(mode: str, handles: list[str], interval: float, outage: float, cluster: Any) -> int:
    """Waits that ended while the controller was down (and one interval after it came back)."""
    if mode == "ours":
        tasks = [asyncio.ensure_future(_shared_wait(h, interval)) for h in handles]
    else:
        tasks = [asyncio.ensure_future(_legacy_shared_waits(handles, interval))]
    await asyncio.sleep(interval * 2)
    assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
    await asyncio.to_thread(cluster.stop, "slurmctld", "slurmdbd")
    await asyncio.sleep(outage)
    await asyncio.to_thread(cluster.start)
    await asyncio.sleep(interval * 2)
    ended = sum(1 for t in tasks if t.done())
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return ended if mode == "ours" else ended * len(handles)  # today: one give-up ends every wait


def _answers(mode: str, waits: int) -> int:
    """Status answers the waits got so far: per-trigger, one per query; shared, every wait one per poll."""
    if mode == "per_trigger":
        return _ANSWERS[0]
    from torchx_airflow.triggers.poller import _POLLERS

    return waits * sum(p.rounds for p in _POLLERS.get(asyncio.get_running_loop(), {}).values())


def _measure_in_process(
    mode: str, handles: list[str], interval: float, rounds: int, root: Path, trace: bool = False
) -> dict[str, float]:
    """``_measure`` in a Python process of its own (a triggerer's), started from this one."""
    name = f"{mode}-{len(handles)}"
    spec = root / f"run-{name}.json"
    spec.write_text(
        json.dumps(
            {
                "mode": mode,
                "handles": handles,
                "interval": interval,
                "rounds": rounds,
                "root": str(root),
                "trace": trace,
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "bench.bench_triggerer", "--measure", str(spec)],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=interval * (rounds + 4) + 300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the {mode} run failed (exit code {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads((root / f"result-{name}.json").read_text())


def _measure_main(spec_path: str) -> None:
    """The process of one run: ``_measure`` of the spec's waits, its figures next to the spec."""
    spec = json.loads(Path(spec_path).read_text())
    root = Path(spec["root"])
    _warm(spec["handles"][0])
    figures = asyncio.run(
        _measure(spec["mode"], spec["handles"], spec["interval"], spec["rounds"], root, spec["trace"])
    )
    (root / f"result-{spec['mode']}-{len(spec['handles'])}.json").write_text(json.dumps(figures))


def _warm(handle: str) -> None:
    """What a wait imports and builds once per process, done before the run, as in a triggerer that
    has been running: the heap figures are then the waits', not the modules'."""
    from torchx_airflow.hooks.torchx import TorchXHook
    from torchx_airflow.run import kills  # noqa: F401  (a trigger that may cancel its app asks it)
    from torchx_airflow.triggers import poller, torchx  # noqa: F401

    hook = TorchXHook(CONN_ID)
    try:
        hook.status(handle)
    finally:
        hook.close()


async def _measure(
    mode: str, handles: list[str], interval: float, rounds: int, root: Path, trace: bool = False
) -> dict[str, float]:
    """One run: all waits started, one interval to settle (hooks made, first queries), then
    ``rounds`` intervals measured. ``trace`` measures the Python heap (tracemalloc slows the loop, so
    lateness and CPU come from the runs without it). Run in a process of its own
    (``_measure_in_process``): the CPU figures are the whole process's."""
    from torchx_airflow.triggers import heap

    waiter = _per_trigger_wait if mode == "per_trigger" else _shared_wait
    freeze_from, heap.FREEZE_FROM = heap.FREEZE_FROM, sys.maxsize if mode == "unfrozen" else heap.FREEZE_FROM
    if trace:
        tracemalloc.start()
    tasks = [asyncio.ensure_future(waiter(h, interval)) for h in handles]
    await asyncio.sleep(interval)
    stop = asyncio.Event()
    probe = asyncio.ensure_future(_lateness_probe(stop))
    before_calls = _calls(root)
    answers0 = _answers(mode, len(handles))
    own0, commands0 = _cpu()
    with FullCollections() as collections:
        await asyncio.sleep(interval * rounds)
    memory = tracemalloc.get_traced_memory()[0] if trace else 0
    own1, commands1 = _cpu()
    answers = max(1, _answers(mode, len(handles)) - answers0)
    own, commands = own1 - own0, commands1 - commands0
    calls = _calls(root) - before_calls
    stop.set()
    lateness = await probe
    # what one full collection costs with every wait set up (the probe stopped: not in its figures)
    wall, cpu = time.perf_counter(), time.thread_time()
    gc.collect()
    full_gc = (time.perf_counter() - wall, time.thread_time() - cpu)
    heap.FREEZE_FROM = freeze_from
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if trace:
        tracemalloc.stop()
    return {
        "queries_per_interval": calls / rounds,
        "lateness_p99": _p99(lateness),
        "lateness_max": max(lateness),
        "full_gc_max": max(collections.pauses, default=0.0),
        "full_gc_cpu_max": max(collections.cpu, default=0.0),
        "full_gc_wall": full_gc[0],
        "full_gc_cpu": full_gc[1],
        "full_gc_per_interval": len(collections.pauses) / rounds,
        "cpu_per_wait_interval": (own + commands) / (len(handles) * rounds),
        "cpu_per_answer": (own + commands) / answers,
        "cpu_commands_share": commands / (own + commands) if own + commands else 0.0,
        "answers_per_interval": answers / rounds,
        "memory_per_wait": memory / len(handles),
    }


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process (every thread) and of its ended children (its query commands:
    a run's process starts no others)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def run() -> list[dict[str, Any]]:
    from tests.slurm.private_cluster import private_slurm

    if shutil.which("sbatch") is None:
        raise RuntimeError("no Slurm here: install it with `scripts/slurm/cluster.sh install` (root)")
    waits = int(os.environ.get("BENCH_WAITS", "5000"))
    interval = float(os.environ.get("BENCH_INTERVAL", "5"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    outage = float(os.environ.get("BENCH_OUTAGE", "30"))
    saved = {k: os.environ.get(k) for k in ("PATH", "SLURM_CONF", f"AIRFLOW_CONN_{CONN_ID.upper()}")}
    root = Path(tempfile.mkdtemp(prefix="torchx-bench-triggerer-"))
    try:
        with private_slurm("full") as cluster:
            os.environ["SLURM_CONF"] = cluster.slurm_conf
            os.environ["PATH"] = f"{_shims(root)}:{os.environ['PATH']}"
            os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
                {"conn_type": "torchx", "extra": {"scheduler": "slurm"}}
            )
            job_ids = _submit_held(waits)
            handles = [f"slurm://torchx/{job_id}" for job_id in job_ids]
            results: dict[str, list[dict[str, float]]] = {"shared": [], "per_trigger": []}
            memory: dict[str, float] = {}
            results["unfrozen"] = []
            for mode in ("shared", "per_trigger", "unfrozen", "shared"):
                results[mode].append(_measure_in_process(mode, handles, interval, rounds, root))
            steady = handles[:STEADY_WAITS]
            results["per_trigger_steady"] = [
                _measure_in_process("per_trigger", steady, interval, rounds, root)
            ]
            for mode in ("shared", "per_trigger"):
                traced = _measure_in_process(mode, handles, interval, 1, root, trace=True)
                memory[mode] = traced["memory_per_wait"]
            ended = {
                mode: asyncio.run(_outage(mode, handles, interval, outage, cluster))
                for mode in ("ours", "today")
            }
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in results[mode])

    def worst(mode: str, key: str) -> float:
        return max(r[key] for r in results[mode])

    note = f"{waits} waits on held Slurm jobs, poll interval {interval:g} s, {rounds} intervals per run"
    return [
        figure(
            f"scheduler queries per poll interval, {waits} deferred waits",
            "one query per wait (per-trigger polling)",
            "<= 2 in total",
            med("shared", "queries_per_interval"),
            med("per_trigger", "queries_per_interval"),
            "queries",
            lambda _r: med("shared", "queries_per_interval") <= 2,
            f"per-trigger polling asks for {waits} (one per wait) and gets through "
            f"{med('per_trigger', 'queries_per_interval'):.0f}: its query threads cannot keep up; {note}",
        ),
        figure(
            f"triggerer event-loop lateness (p99), {waits} waits",
            "0.1 s (Airflow's blocked-loop warning)",
            "p99 <= 0.1 s",
            worst("shared", "lateness_p99"),
            LATE_WARNING,
            "s",
            lambda ratio: ratio <= 1,
            f"the loop's wake-ups every 50 ms, p99 of each run, the worst run; the latest wake-up: "
            f"{worst('shared', 'lateness_max'):.3f} s; per-trigger polling p99 "
            f"{worst('per_trigger', 'lateness_p99'):.3f} s; {note}",
        ),
        figure(
            f"full garbage collection (a pause of the event loop), {waits} waits",
            "the same shared waits with the heap left unfrozen",
            "<= 0.1 s",
            med("shared", "full_gc_wall"),
            worst("unfrozen", "full_gc_wall"),
            "s",
            lambda _r: med("shared", "full_gc_wall") <= LATE_WARNING,
            f"one gc.collect() timed after each run's intervals, every wait still set up; CPU "
            f"{med('shared', 'full_gc_cpu') * 1000:.0f} ms "
            f"(unfrozen {worst('unfrozen', 'full_gc_cpu') * 1000:.0f} ms). "
            "Full collections that came on their own: "
            f"{med('shared', 'full_gc_per_interval'):.2f} per interval, the longest "
            f"{worst('shared', 'full_gc_max') * 1000:.0f} ms (unfrozen "
            f"{med('unfrozen', 'full_gc_per_interval'):.2f}, "
            f"{worst('unfrozen', 'full_gc_max') * 1000:.0f} ms). "
            "Unchanged sacct records are not parsed again; the waits' heap is frozen after the poll "
            f"that found them (triggers/heap.py); {note}",
        ),
        figure(
            "triggerer CPU per wait and poll (incl. query commands)",
            f"per-trigger polling, on {len(steady)} waits",
            "<= 1/20",
            med("shared", "cpu_per_answer"),
            med("per_trigger_steady", "cpu_per_answer"),
            "CPU-s",
            lambda ratio: ratio <= 0.05,
            "CPU of the triggerer's process (each run a process of its own: its threads, and its "
            "children, which are only its sacct/squeue/scontrol commands) over the status answers its "
            f"waits got: the waits times the polls ({med('shared', 'answers_per_interval') / waits:.2f} "
            "polls per interval: a poll's query comes on top of the interval); per-trigger, one per query. "
            f"Per-trigger polling on {len(steady)} waits answers each every interval, its hooks built: "
            f"{med('per_trigger_steady', 'answers_per_interval'):.0f} answers per interval. On {waits} "
            f"it got {med('per_trigger', 'answers_per_interval'):.0f} per interval, nearly all a wait's "
            f"first (its hook built): {med('per_trigger', 'cpu_per_answer'):.6f} CPU-s each, "
            f"{med('per_trigger', 'cpu_per_wait_interval'):.6f} per wait and interval for that fraction of "
            "the work. Query commands: "
            f"{med('shared', 'cpu_commands_share'):.0%} of the shared waits' CPU, "
            f"{med('per_trigger_steady', 'cpu_commands_share'):.0%} of per-trigger polling's; {note}",
        ),
        figure(
            "triggerer memory per wait (Python heap, tracemalloc)",
            "per-trigger polling",
            "reported",
            memory["shared"],
            memory["per_trigger"],
            "bytes",
            lambda _r: True,
            note,
        ),
        figure(
            f"waits ended by a {outage:g} s controller outage (slurmctld + slurmdbd stopped), {waits} waits",
            "today's shared poller (5 attempts, 0.5 -> 4 s, error to every wait)",
            "0",
            ended["ours"],
            ended["today"],
            "waits",
            lambda _r: ended["ours"] == 0,
            f"{waits} deferred waits on held jobs of a private cluster, poll interval {interval:g} s; "
            f"counted until one interval after the controller answered again; outage_timeout 600 s",
        ),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        _measure_main(sys.argv[2])
    else:
        for row in run():
            print(row)
