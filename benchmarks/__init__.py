"""Benchmarks: scripts that measure Kale and print tables (and JSON), asserting nothing.

Run each from the repository root as a module, ``python -m benchmarks.NAME --help``; shared
plumbing (the repository root, the shared data folder) is in :mod:`benchmarks.paths`.
"""
