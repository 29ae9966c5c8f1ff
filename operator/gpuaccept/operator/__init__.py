"""The gpuaccept operator: a pure reconcile core with thin kopf wiring around it.

``gpuaccept.operator.core`` holds the pure functions (no I/O, no kopf, no
Kubernetes client); the other modules adapt them to the API server.
"""
