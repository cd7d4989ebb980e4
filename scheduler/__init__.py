"""``kale scheduler``: a secondary Kubernetes scheduler running ``placement``'s policies.

No ``kubernetes`` import here: watches, bindings, pod status, evictions, Events and the
Lease are in ``kube/``; the decision is a call into ``placement/`` (see
:mod:`scheduler.adapter`), whom to preempt is :mod:`scheduler.preemption`.
docs/scheduler.md has the whole picture.
"""
