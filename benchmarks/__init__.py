"""Benchmarks for nbstream: run ``python -m benchmarks.engine`` (see its ``--help``)."""
