"""Kafka for one machine: the embedded broker, trace replay and the demo's stand-in consumer.

Apart from the meter on purpose: the controller never needs them, the demo, the tests and the
profiler do.
"""
