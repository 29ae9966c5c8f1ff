"""The fabric test (docs/fabric.md), pure:

* :mod:`.pairing`: the pairing algorithm (which pairs run next, which node of a
  failing pair is the bad one) over plain results;
* :mod:`.policypass`: one pass over a policy's pairs (read finished pairs into
  the statuses, start second pods, plan new pairs and the verdicts);
* :mod:`.phase`: the node's own reconcile in phase ``Fabric`` (records the
  verdict the pass gave it);
* :mod:`.membership`: who takes part in a policy's pass, and who can take a pod.
"""
