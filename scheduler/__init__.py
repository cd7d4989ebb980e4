"""``kale scheduler``: a secondary Kubernetes scheduler running ``placement``'s policies.

No ``kubernetes`` import here: watches, bindings, Events and the Lease are in
``autoscaler/actuators/``; the decision is a call into ``placement/`` (see
:mod:`scheduler.adapter`). docs/scheduler.md has the whole picture.
"""
