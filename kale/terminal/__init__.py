"""What every command shows a person or a script: numbers, tables, JSON, progress, flags.

Shared by the ``kale`` CLI (``kale/cli``), the trainer's commands (``kale/cli/trainer.py``),
the demo and the benchmarks. It lives outside ``kale.cli`` on purpose: when these
helpers sat in the CLI package, ``trainer`` and ``kale.demo`` imported the CLI that
imports them (two package cycles). It depends on click, tqdm and ``common`` only. The one
number formatter (``8.03k``, ``1.23%``) is :mod:`common.numbers`, shared with the
simulator's report and mirrored by the dashboard.

* :mod:`kale.terminal.output` — JSON on stdout (the contract) and aligned tables;
* :mod:`kale.terminal.flags` — click parameter types and the flag validators;
* :mod:`kale.terminal.progress` — progress that moves during fits, or a line per fit.
"""
