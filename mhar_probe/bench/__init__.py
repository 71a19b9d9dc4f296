"""Benchmarks that ship with the package (`mhar bench ...`): GPU-only, results as JSON."""
