"""The controller: every interval, for every job, measure → forecast → plan → approve → act.

The planner it runs is :mod:`autoscaler.policy` — the same code the simulator runs; this
package adds time, I/O and bookkeeping around it. It never imports ``kubernetes`` or
``kafka``: actuators and metric sources come in through factories (see :mod:`.loop`).
"""
