"""The small leaf every other package may use: atomic writes, the root error types,
durations, bounded YAML reading, the daemons' settings files, structured logs and the one
number formatter of everything a person reads.

It imports no other package of the project, so it can never take part in an import cycle.
"""
