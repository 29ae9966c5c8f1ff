"""The checks' pure half, shared by the probe and the operator.

One module per check (policy section, ``Observed`` model, ``judge``,
condensing, key figures, reason code), the registry that lists them
(:mod:`.registry`), the policy models built from it (:mod:`.policy`), the
node-level verdict (:mod:`.verdict`); the generators of the CRDs and the docs'
tables, used only at build time, are in :mod:`.gen`. No torch,
no NVML, no Kubernetes client: layers are contracts ← checks ← probe and
contracts ← checks ← operator.
"""
