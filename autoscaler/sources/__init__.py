"""autoscaler/sources."""
