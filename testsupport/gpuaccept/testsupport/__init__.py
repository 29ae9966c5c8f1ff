"""Test support for gpuaccept — never shipped in the wheel.

- :mod:`gpuaccept.testsupport.controlplane`: start/stop/reuse the local control
  plane (etcd + kube-apiserver built from ``hack/controlplane``).
- :mod:`gpuaccept.testsupport.pytest_plugin`: the session fixture ``control_plane``.
- :mod:`gpuaccept.testsupport.kubelet_standin`: the kubelet stand-in that
  registers simulated GPU nodes and runs their pods as local processes; its parts
  are the ``standin_*`` modules (nodes, behaviours, containers, pod runner).
"""
