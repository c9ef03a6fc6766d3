"""Benchmarks: the cached plan, named plans and peers in one process, and the table of results."""
