"""A suite's evaluation data: the data set it names (:data:`faithbench.models.data.datasets.DATASETS`, each registered
beside its loader), read once per process, text as ids of the suite's models' vocabulary.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

from faithbench.errors import UserError
from faithbench.models.data.datasets import DATASETS, EvalData
from faithbench.models.nets.text_transformer import WORDPIECE
from faithbench.models.registry import MODELS


class DataSettings(Protocol):
    """What the data depends on (a :class:`faithbench.bench.run.suite.Suite` has it)."""

    dataset: str
    data_root: str | None
    models: tuple[str, ...]
    class_index: str


def load_data(suite: DataSettings) -> EvalData:
    """The suite's evaluation data (kept for the process: the report's panel reuses the run's)."""
    spec = DATASETS.get(suite.dataset)
    if spec.class_folders:
        return _load(suite.dataset, suite.data_root, class_index=class_index_for(suite))
    if spec.modality != "text":
        return _load(suite.dataset, suite.data_root)
    return _load(suite.dataset, suite.data_root, text_tokenizer(suite.models))


IMAGENET_SOURCES = ("torchvision", "bcos-hub", "gh-release", "huggingface")  # the registry's ImageNet-1k classifiers


def class_index_for(suite: DataSettings) -> str:
    """How the suite's class folders map to labels: its ``class_index``; ``auto`` reads synset folder names as
    ImageNet-1k indices only when the suite has a registry ImageNet classifier (a user's model fine-tuned on a
    synset-named subset, such as Imagenette, reads the sorted positions it was trained with)."""
    if suite.class_index != "auto":
        return suite.class_index
    return "auto" if any(MODELS.get(m).source in IMAGENET_SOURCES for m in suite.models) else "sorted"


def text_tokenizer(models: tuple[str, ...] | list[str], where: str = "suite") -> str:
    """The vocabulary the text data is tokenized with: that of the models (MiniLM's WordPiece by default)."""

    tokenizers = {MODELS.get(m).tokenizer for m in models} - {None}
    if len(tokenizers) > 1:
        by = ", ".join(f"{m} ({MODELS.get(m).tokenizer})" for m in models)
        raise UserError(f"{where} the text models read different vocabularies (tokenizers): {by}; run them apart")
    return tokenizers.pop() if tokenizers else WORDPIECE


@lru_cache(maxsize=2)
def _load(
    dataset: str, data_root: str | None, tokenizer: str | None = None, class_index: str | None = None
) -> EvalData:
    """Data set ``dataset``; text: as ids of ``tokenizer`` (the vocabulary of the suite's models); class folders:
    labelled by ``class_index``."""
    spec = DATASETS.get(dataset)
    if class_index is not None:
        return spec.load(data_root, class_index)
    return spec.load(data_root) if tokenizer is None else spec.load(data_root, tokenizer)
