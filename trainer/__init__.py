"""The reference parameter-server trainer and the profiler (``kale train``, ``kale profile``).

Layout (torch-free modules are marked *): ``spec``* (model shape, blocks), ``records``*
(synthetic CTR samples on the wire), ``rescale``* (the measured-rescale JSON), ``spawn``*
and ``checkpoint``* (child config, manifests), ``launcher``* (the supervisor),
``profiler``*, ``cli``*; ``model``, ``ps``, ``node`` and ``stream`` run in the training
processes. See docs/trainer.md.
"""
