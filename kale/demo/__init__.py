"""``kale demo``: the whole system, live, on one laptop, in a few minutes.

:mod:`.plan` fixes the numbers (the job, the trace, how time and traffic are compressed),
:mod:`.warp` lets forecasters see the compressed run in trace time, :mod:`.live` runs the
broker, replay, controller, workers and dashboard and stops them all, and :mod:`.summary`
measures the live run and compares it with the simulator's HPA on the same replay.
"""
