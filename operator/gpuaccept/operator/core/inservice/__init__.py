"""Health in service (pure): the rules that judge an accepted node from its own
evidence while it takes work (policy ``inService``, docs/policy.md).

* :mod:`.evidence`: the plain inputs (the Node's signals, a watch report's Xid
  events and durable GPU state) and the reasons;
* :mod:`.signals`: the Node's own signals, debounced (allocatable below capacity
  past its grace, other tools' conditions held for their duration);
* :mod:`.xids`: watch reports into the ledger (counted once, bursts merged in any
  order) and the Xid rules (fatal, repeated bursts, memory state, application
  suspects);
* :mod:`.correlation`: the same signature on many nodes at once is a common cause;
* :mod:`.rules`: ``evaluate(policy, ledger, signals, reports, now)`` into the new
  ledger, the verdict (or none) and the suspects;
* :mod:`.phase`: an accepted node's reconcile step, through the one verdict path
  (``core/record.py``).
"""
