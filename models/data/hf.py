"""The Hugging Face path of the text suite, for users who have the data (``pip install -e '.[hf]'``).

Data sets: AG News (``fancyzhx/ag_news``), IMDB (``stanfordnlp/imdb``) and HateXplain
(``Hate-speech-CNERG/hatexplain``, the annotators' majority label; posts without one are dropped), read through
``datasets``, tokenized with the WordPiece vocabulary of every text model here (MiniLM's = bert-base-uncased's).
The zoo's BERT-family recipes (:mod:`faithbench.models.zoo.text_recipes`) train on their train splits.

Offline, ``datasets`` retries the network for minutes or fails with an unrelated error unless ``HF_HUB_OFFLINE``
and ``HF_DATASETS_OFFLINE`` are set. So before loading we look for the data or checkpoint in the local caches
and, when it is absent and huggingface.co cannot be reached, stop with one line that names what is missing and
how to get it; when it is cached, it is read with both variables set (no network call).
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import torch

from faithbench.errors import UserError
from faithbench.models.checkpoints.hub import hf_home, hf_hub_cache
from faithbench.models.data.text import TextSplit

HF_HOST = "huggingface.co"


@dataclass(frozen=True)
class HFDataset:
    repo: str
    split: str
    classes: tuple[str, ...]
    rows: Callable[[object], tuple[list[str], list[int]]]  # the loaded split -> (texts, labels)


def _plain(text: str = "text", label: str = "label") -> Callable[[object], tuple[list[str], list[int]]]:
    return lambda split: (list(split[text]), [int(y) for y in split[label]])


def _hatexplain(split: object) -> tuple[list[str], list[int]]:
    """Posts with a majority label among their annotators (0 hatespeech, 1 normal, 2 offensive)."""
    texts, labels = [], []
    for tokens, annotators in zip(split["post_tokens"], split["annotators"], strict=True):
        (label, votes), *rest = Counter(annotators["label"]).most_common()
        if not rest or rest[0][1] < votes:
            texts.append(" ".join(tokens))
            labels.append(int(label))
    return texts, labels


HF_DATASETS = {
    "ag-news": HFDataset("fancyzhx/ag_news", "test", ("world", "sports", "business", "sci/tech"), _plain()),
    "imdb": HFDataset("stanfordnlp/imdb", "test", ("negative", "positive"), _plain()),
    "hatexplain": HFDataset("Hate-speech-CNERG/hatexplain", "test", ("hatespeech", "normal", "offensive"), _hatexplain),
}


def _datasets_cache() -> Path:
    return Path(os.environ.get("HF_DATASETS_CACHE") or os.path.join(hf_home(), "datasets"))


def cached(repo: str, kind: str) -> bool:
    """Whether ``repo`` (a ``dataset`` or a ``model``) is in the local Hugging Face caches."""
    owner_name = repo.replace("/", "--")
    hub = Path(hf_hub_cache()) / f"{kind}s--{owner_name}"
    if hub.is_dir() and any(hub.glob("snapshots/*/*")):
        return True
    return kind == "dataset" and any(_datasets_cache().glob(f"{repo.replace('/', '___')}*"))


def online(host: str = HF_HOST, timeout: float = 3.0) -> bool:
    """Whether ``host`` answers on port 443 within ``timeout`` seconds (and the user has not declared offline)."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return False
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def require(repo: str, kind: str, what: str) -> None:
    """Stop with one line when ``repo`` (``kind`` dataset or model) is neither cached nor downloadable; read cached
    data offline."""
    if cached(repo, kind):
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
        return
    if not online():
        fetch = f"huggingface-cli download {'--repo-type dataset ' if kind == 'dataset' else ''}{repo}"
        raise UserError(
            f"{what} {repo} is not in the Hugging Face cache ({hf_hub_cache()}) and {HF_HOST} cannot be reached: on a "
            f"machine with internet run `{fetch}` and copy that folder here (or set HF_HOME to a copy of it)"
        )


def hub_snapshot(repo: str) -> str | None:
    """The local folder of data set ``repo`` in the Hugging Face hub cache (``huggingface-cli download``), or None.

    ``datasets`` loads a folder offline (its files say the format and splits); given the repo id offline it looks
    only in its own cache of data sets it prepared online before."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(repo, repo_type="dataset", local_files_only=True, cache_dir=hf_hub_cache())
    except LocalEntryNotFoundError:
        return None


def load_hf_split(name: str, split: str | None = None) -> tuple[TextSplit, tuple[str, ...]]:
    """Split ``split`` (default: the evaluation split, test) of data set ``name`` (a key of ``HF_DATASETS``) and
    its class names."""
    spec = HF_DATASETS[name]
    if find_spec("datasets") is None:
        raise UserError(
            f"data set {name!r} is read with Hugging Face datasets: install the hf extra, pip install -e '.[hf]' "
            "in the faithbench checkout"
        )
    require(spec.repo, "dataset", f"data set {name!r}:")
    import datasets

    source = hub_snapshot(spec.repo) or spec.repo  # offline, `datasets` reads a repo id only from its own cache
    texts, labels = spec.rows(datasets.load_dataset(source, split=split or spec.split))
    return TextSplit(tuple(texts), torch.tensor(labels)), spec.classes
