"""faithbench's shared foundation: the registry type, user errors and atomic file writes.

Every layer (``metrics``, ``models``, ``attributions``, ``bench``) imports from here; this package
imports none of them, so the lower layers work without the command line on top.
"""
