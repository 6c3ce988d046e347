"""Loaders of published checkpoints, by name, each failing with a clear message offline: torchvision, B-cos and
ALOE (:mod:`.hub`), the B-cosification release (:mod:`.bcosified_hub`), BERT-family text models (:mod:`.hf`)."""
