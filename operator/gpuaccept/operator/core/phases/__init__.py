"""The phases of a node and the features that act in them (pure): what a node in
each phase does next, given what was observed.

Called only from :mod:`gpuaccept.operator.core.reconcile`; each phase changes a
node's status only through the record layer (``core/record.py``: verdicts;
``core/transitions.py``: new rounds, a re-verification given up, a release).
"""
