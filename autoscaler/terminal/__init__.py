"""What every command shows a person or a script: numbers, tables, JSON, progress, flags.

Shared by the ``kale`` CLI (``autoscaler/cli``), the trainer's commands (``trainer/cli.py``),
the demo and the benchmarks. It lives outside ``autoscaler.cli`` on purpose: when these
helpers sat in the CLI package, ``trainer`` and ``autoscaler.demo`` imported the CLI that
imports them (two package cycles). It depends on click, tqdm and ``autoscaler.durations``
only; ``tools/check_layers.py`` keeps ``autoscaler.cli`` out of every other package.

* :mod:`autoscaler.terminal.formatting` — the one number formatter (``8.03k``, ``1.23%``);
* :mod:`autoscaler.terminal.output` — JSON on stdout (the contract) and aligned tables;
* :mod:`autoscaler.terminal.flags` — click parameter types and the flag validators;
* :mod:`autoscaler.terminal.progress` — progress that moves during fits, or a line per fit.
"""
