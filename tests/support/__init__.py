"""Test doubles that speak real protocols (an HTTP Kubernetes API server, …)."""
