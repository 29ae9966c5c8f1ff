"""``kubectl gpuaccept``: explain a node's verdict, re-probe it, and show what a
candidate policy would change, from the NodeAcceptances the operator keeps.

:mod:`.explain` and :mod:`.whatif` are pure (stored objects in, lines out);
:mod:`.cli` reads the cluster and is the only part that writes (``reprobe``).
"""
