"""autoscaler/cli."""
