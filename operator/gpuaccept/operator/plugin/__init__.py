"""``kubectl gpuaccept``: explain a node's verdict, re-probe it, release it with a
record of who and when, and show what a candidate policy would change, from the
NodeAcceptances the operator keeps.

:mod:`.explain`, :mod:`.whatif` and :mod:`.release` are pure (stored objects in,
lines or annotations out); :mod:`.cli` reads the cluster and is the only part that
writes (``reprobe``, ``release``).
"""
