"""Drawing blocks of distinct-class examples, most confident first (GridPG grids, SeqPG sequences)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def draw_distinct_classes(
    labels: Tensor, score: Tensor, eligible: Tensor, *, per_block: int, n_blocks: int | None, seed: int
) -> Tensor:
    """Blocks of ``per_block`` examples of distinct classes, each class's best examples first.

    Eligible examples are queued per class by ``score``, descending. While at least ``per_block``
    classes still have queued examples, ``per_block`` of them are drawn at random without
    replacement (``numpy.random.RandomState(seed).choice``; the draw order is the order inside the
    block) and each gives its next example. Stops after ``n_blocks`` blocks (``None``: as many as
    possible). Returns (n, per_block) indices. Runs on the host: it is index bookkeeping only.
    """
    labels_np = labels.detach().cpu().numpy().astype(np.int64)
    score_np = score.detach().cpu().double().numpy()
    eligible_np = eligible.detach().cpu().numpy().astype(bool)
    queues: dict[int, list[int]] = {}
    for i in np.lexsort((-score_np, labels_np)):
        if eligible_np[i]:
            queues.setdefault(int(labels_np[i]), []).append(int(i))
    heads = dict.fromkeys(queues, 0)
    rng = np.random.RandomState(seed)
    blocks: list[list[int]] = []
    while n_blocks is None or len(blocks) < n_blocks:
        available = sorted(k for k, q in queues.items() if heads[k] < len(q))
        if len(available) < per_block:
            break
        chosen = [int(k) for k in rng.choice(available, per_block, replace=False)]
        blocks.append([queues[k][heads[k]] for k in chosen])
        for k in chosen:
            heads[k] += 1
    return torch.tensor(blocks, dtype=torch.long).reshape(-1, per_block)
