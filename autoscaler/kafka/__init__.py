"""Everything the autoscaler reads from Kafka: the meter (a topic's arrivals and a group's lag),
its SQLite history and backfill, client factories with bounded timeouts, and SASL/TLS.

The only Kafka code of the autoscaler; :mod:`autoscaler.kafka.local` holds the embedded
broker and the replay used on one machine.
"""
