"""The only code that talks to Kubernetes: the official client built once with its retries,
leader election on a Lease, list/watch caches, Events, pods and bindings, ConfigMaps, Secrets
and Kale's custom resources.

Everything above this package (actuators, the controller, the scheduler) reaches the API
server through these modules, so the ``kubernetes`` import lives here alone.
"""
