"""One-off experiments: scripts that answered a question once and are kept to be reread.

Not shipped, not collected by pytest; linted like the rest. Each runs from the repository
root as ``python -m experiments.NAME`` (README.md says what each one is).
"""
