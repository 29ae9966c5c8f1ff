"""``python -m gpuaccept.cli``: the ``gpuaccept`` console script."""

from gpuaccept.cli import main

raise SystemExit(main())
