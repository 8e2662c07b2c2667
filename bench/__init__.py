"""Benchmarks: ``make bench`` runs every ``bench/bench_*.py`` and writes docs/benchmarks.md."""
