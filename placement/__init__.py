"""Where pods land and which queued job runs next: Kale's placement half.

A leaf package: it never imports ``autoscaler`` (the CLI in ``kale/cli/`` calls it),
talks to no broker and no API server, and imports torch only under ``placement/agents/``.
Policies are pure functions of a cluster snapshot, so the simulator, the CLI and the
Kubernetes scheduler run exactly the same decisions.
"""
