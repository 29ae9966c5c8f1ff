"""Build-time generators, not shipped behaviour: the CRDs (:mod:`.crds`, ``make
crds``) and the docs' generated tables (:mod:`.docs`, ``make docs``), both from
the check registry.

Nothing the probe or the operator runs imports this package (``lint-imports``
holds it), and the images leave it out (``.dockerignore``).
"""
