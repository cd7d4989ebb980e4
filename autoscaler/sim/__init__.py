"""Trace-driven simulation: replay arrival rates against sizing policies and compare them.

``engine`` holds the queueing semantics every policy is judged by (docs/design.md, "Simulation
semantics"); ``baselines`` the reactive and fixed policies (HPA, KEDA, Autopilot, static);
``policies`` maps names to policy objects (Kale's planner, MADU and the oracle come from
:mod:`autoscaler.policy.kale`); ``multi`` runs several jobs under one GPU quota; ``runner``
and ``report`` are what ``kale simulate`` calls.
"""
