"""Benchmarks for navi-memory (`make bench`): scripts that print figures, not timed tests.

``benchmarks.run`` starts a throw-away embedded PostgreSQL and runs each section (``facts``, ...)
on a database of its own; docs/benchmarks.md holds the last figures and what they mean.
"""
