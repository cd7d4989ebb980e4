"""autoscaler/sim."""
