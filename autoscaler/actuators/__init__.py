"""autoscaler/actuators."""
