"""Benchmark scripts: `python -m benchmarks.run_all [--quick]` (or `dynpar bench`) runs them all
and writes results/bench/REPORT.md via benchmarks/make_report.py."""
