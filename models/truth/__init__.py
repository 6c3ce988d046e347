"""The ground-truth tier: hand-set models whose exact attribution is known by construction, for images
(``image_*``: cells) and tokens (``token_*``), each as its data, its networks and its exact attribution with the
adapters (``docs/ground-truth.md``)."""
