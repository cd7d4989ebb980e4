"""throughput."""
