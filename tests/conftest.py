"""Shared pytest configuration.

The control-plane fixture (a real kube-apiserver + etcd) comes from the test
support package; integration tests ask for it by name.
"""

pytest_plugins = ["gpuaccept.testsupport.pytest_plugin"]
