"""Workload loaders (openb CSVs, SWF) and seeded synthetic generators."""
