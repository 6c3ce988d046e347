"""Zoo recipes of the text models: MiniLM fine-tuned on Rotten Tomatoes, conventional and B-cos (B-cos LM).

The conventional classifier starts from the MiniLM encoder (its first ``depth`` blocks) with a new
classifier and trains with cross-entropy. Its B-cos counterpart follows the B-cos LM seed: the same
pretrained weights converted (:func:`models.bcos_text.bcos_text_transformer`: every bias removed, B-cos
linear layers of the given B, tanh removed) and fine-tuned with one-hot binary cross-entropy. AdamW,
linear decay to 0, shuffled batches of sentences padded per batch, all seeded; CPU-sized defaults
(the paper trains 5 epochs at lr 2e-5 to 3e-5, batch 16).
"""

from __future__ import annotations

from functools import lru_cache, partial

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from models.bcos_text import bcos_text_transformer
from models.recipes import Recipe
from models.text_data import rotten_tomatoes
from models.text_encoding import tokenize
from models.text_models import TextTransformer, minilm_classifier
from models.training import training_step

DATASET = "rotten-tomatoes"


@lru_cache(maxsize=1)
def _data() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    data = rotten_tomatoes()
    train_ids, _ = tokenize(data.train.texts)
    test_ids, _ = tokenize(data.test.texts)
    return train_ids, data.train.labels, test_ids, data.test.labels


def _architecture(depth: int, b: float | None) -> nn.Module:
    """The recipe's module with MiniLM's geometry (weights come from the checkpoint or from training)."""
    model = TextTransformer(depth=depth, num_classes=2)
    return model if b is None else bcos_text_transformer(model, b)


def _logits(model: nn.Module, ids: Tensor) -> Tensor:
    length = int((ids != 0).sum(dim=1).max())  # [PAD] is id 0 in the WordPiece vocabulary
    ids = ids[:, :length]
    return model(ids, (ids != 0).long())


@torch.no_grad()
def held_out(model: nn.Module, batch_size: int = 256) -> dict:
    """Accuracy on the Rotten Tomatoes test split."""
    _, _, ids, labels = _data()
    model.eval()
    predictions = torch.cat([_logits(model, ids[s : s + batch_size]).argmax(1) for s in range(0, len(ids), batch_size)])
    return {"test_accuracy": (predictions == labels).float().mean().item(), "n_test": len(labels)}


def length_batches(lengths: Tensor, batch_size: int, gen: torch.Generator, pool: int = 32) -> list[Tensor]:
    """One epoch's batches: a seeded shuffle, cut into pools of ``pool`` batches, each pool sorted by length and cut
    into batches, the batches shuffled again. Padding to the batch's longest costs little (2x faster than random
    batches of Rotten Tomatoes sentences)."""
    order = torch.randperm(len(lengths), generator=gen)
    batches = []
    for start in range(0, len(order), batch_size * pool):
        chunk = order[start : start + batch_size * pool]
        chunk = chunk[lengths[chunk].argsort(stable=True)]
        batches += list(chunk.split(batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def train_text_classifier(
    model: nn.Module, ids: Tensor, labels: Tensor, *, epochs: int, lr: float, batch_size: int, seed: int, loss: str
) -> None:
    """AdamW (weight decay 0.01), linear decay to 0, length-pooled seeded batches (:func:`length_batches`);
    ``loss``: ``ce`` or ``bce`` (one-hot)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    lengths = (ids != 0).sum(dim=1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps = epochs * ((len(labels) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / steps)
    model.train()
    with tqdm(total=steps, desc="text model", leave=False, unit="step") as bar:
        for _ in range(epochs):
            for idx in length_batches(lengths, batch_size, gen):
                training_step(_logits(model, ids[idx]), labels[idx], loss, opt, sched, bar)
    model.eval()


def _train(model: nn.Module, deps: dict, p: dict) -> dict:
    start = minilm_classifier(num_classes=2, depth=p["depth"], seed=p["seed"])
    b = p.get("b")
    model.load_state_dict((start if b is None else bcos_text_transformer(start, b)).state_dict())
    before = held_out(model)["test_accuracy"]
    ids, labels, _, _ = _data()
    train_text_classifier(
        model,
        ids,
        labels,
        epochs=p["epochs"],
        lr=p["lr"],
        batch_size=p["batch_size"],
        seed=p["seed"],
        loss="ce" if b is None else "bce",
    )
    return {"accuracy_before_finetuning": before}


def minilm_recipe(
    name: str, *, depth: int, epochs: int, lr: float, b: float | None = None, batch_size: int = 32, seed: int = 0
) -> Recipe:
    """A conventional (``b`` None) or B-cos MiniLM sentiment classifier with ``depth`` blocks."""
    params: dict = {"depth": depth, "epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": seed}
    params |= {"b": b} if b is not None else {}
    what = "conventional MiniLM" if b is None else f"B-cos MiniLM (B = {b:g}, no biases, no tanh)"
    loss = "cross-entropy" if b is None else "BCE"
    blocks = "all 6" if depth == 6 else f"{depth} of its 6"
    return Recipe(
        name,
        "standard" if b is None else "bcos",
        f"{what}, {blocks} blocks, fine-tuned {epochs} epoch(s) on Rotten Tomatoes with {loss}",
        None,  # text models take token ids: the adapter brings its own encoding (models.text_encoding)
        partial(_architecture, depth, b),
        _train,
        params=params,
        activation="softmax" if b is None else "sigmoid",
        modality="text",
        dataset=DATASET,
        num_classes=2,
        held_out=held_out,
    )


TEXT_RECIPES = (
    minilm_recipe("minilm_rt", depth=6, epochs=1, lr=5e-5),
    minilm_recipe("bcos_minilm_rt", depth=6, epochs=1, lr=5e-5, b=1.5),  # 1 epoch: the suite fits 15 min on 2 cores
    minilm_recipe("minilm3_rt", depth=3, epochs=1, lr=5e-5),
    *(
        minilm_recipe(f"bcos_minilm3_rt{tag}", depth=3, epochs=2, lr=5e-5, b=b)
        for tag, b in (("_b1", 1.0), ("_b1_25", 1.25), ("", 1.5), ("_b2", 2.0), ("_b2_5", 2.5))
    ),
)
