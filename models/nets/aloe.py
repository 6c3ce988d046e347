"""ALOE (Align Once to Explain): label-free alignment of a B-cosified ViT student to a frozen teacher.

Student S = ``bcosify(teacher)`` (B = 2, no biases, positional embedding kept). On unlabeled
images, with L transformer blocks and aligned depths D = {floor(L/3), floor(2L/3), L}:

    loss = lambda_g mean_batch (1 - cos(pool_S, pool_T))
         + lambda_l sum_{d in D} mean_{batch, tokens} (1 - cos(tok_S^d, tok_T^d))
         + alpha sum_layers (||W_T||_F - ||W_S||_F)^2

The local term sums over the aligned depths, as ALOE Eq. 4 and its code do
(``local_reduction="sum"``, the default); ``"mean"`` averages them instead (weight 1 / |D|).

pool = mean-pooled final tokens (SimpleViT has no [CLS]). AdamW without weight decay, cosine
schedule, gradient-norm clipping at 1.0, early stopping on the held-out alignment loss. A B-cos
linear probe (the student's head, trained with BCE on labels, backbone frozen) then makes the
aligned encoder a classifier.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from bcos.models.vit import SimpleViT
from einops import rearrange
from torch import Tensor, nn

from faithbench.errors import check_choice
from faithbench.models.zoo.training import progress_bar

LOCAL_REDUCTIONS = ("sum", "mean")


@dataclass(frozen=True)
class AlignmentConfig:
    lambda_global: float = 1.0
    lambda_local: float = 1.0
    local_reduction: str = "sum"  # over the aligned depths: "sum" (ALOE Eq. 4) or "mean"
    alpha_weight_norm: float = 0.0  # the released ALOE code has no weight-norm term
    lr: float = 1e-3
    max_epochs: int = 20
    batch_size: int = 64
    grad_clip: float = 1.0
    patience: int = 3
    holdout_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice(self.local_reduction, "local_reduction", LOCAL_REDUCTIONS)


def aligned_depths(n_blocks: int) -> list[int]:
    """1-based block indices floor(L/3), floor(2L/3), L."""
    return sorted({max(1, n_blocks // 3), max(1, 2 * n_blocks // 3), n_blocks})


def vit_tokens(vit: SimpleViT, x: Tensor) -> tuple[list[Tensor], Tensor]:
    """Token states after every transformer block and the mean-pooled final tokens."""
    t = vit.to_patch_embedding(x)
    pe = vit.positional_embedding(t)
    t = rearrange(t, "b ... d -> b (...) d") + pe
    states = []
    for block in vit.transformer:
        t = block(t)
        states.append(t)
    return states, t.mean(dim=1)


def _linear_weights(module: nn.Module) -> dict[str, Tensor]:
    return {
        n.replace(".linear.weight", ".weight"): p
        for n, p in module.named_parameters()
        if n.endswith("weight") and p.dim() == 2
    }


def alignment_loss(
    student: nn.Sequential, teacher: SimpleViT, student_in: Tensor, teacher_in: Tensor, cfg: AlignmentConfig
) -> Tensor:
    """The ALOE loss for one batch (student takes [x, 1 - x]; its layer 0 normalises)."""
    with torch.no_grad():
        t_states, t_pool = vit_tokens(teacher, teacher_in)
    s_states, s_pool = vit_tokens(student[1], student[0](student_in))
    depths = aligned_depths(len(t_states))
    local = torch.stack([(1 - F.cosine_similarity(s_states[d - 1], t_states[d - 1], dim=-1)).mean() for d in depths])
    loss = cfg.lambda_global * (1 - F.cosine_similarity(s_pool, t_pool, dim=-1)).mean()
    loss = loss + cfg.lambda_local * (local.sum() if cfg.local_reduction == "sum" else local.mean())
    if cfg.alpha_weight_norm:
        tw, sw = _linear_weights(teacher), _linear_weights(student[1])
        pairs = [(tw[k], sw[k]) for k in tw if k in sw and tw[k].shape == sw[k].shape]
        loss = loss + cfg.alpha_weight_norm * sum((a.norm() - b.norm()) ** 2 for a, b in pairs)
    return loss


def align(
    student: nn.Sequential,
    teacher: SimpleViT,
    images: Tensor,
    *,
    teacher_encode,
    student_encode,
    cfg: AlignmentConfig = AlignmentConfig(),
) -> dict:
    """Align ``student`` to the frozen ``teacher`` on unlabeled ``images``; returns a training log."""
    teacher.eval().requires_grad_(False)
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    order = torch.randperm(len(images), generator=gen)
    n_hold = max(1, int(len(images) * cfg.holdout_fraction))
    hold, train = images[order[:n_hold]], images[order[n_hold:]]
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    steps_per_epoch = (len(train) + cfg.batch_size - 1) // cfg.batch_size
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.max_epochs * steps_per_epoch)

    def held_out_loss() -> float:
        student.eval()
        with torch.no_grad():
            return alignment_loss(student, teacher, student_encode(hold), teacher_encode(hold), cfg).item()

    best, best_state, bad, log = held_out_loss(), None, 0, []
    for epoch in progress_bar(range(cfg.max_epochs), desc="align", leave=False, unit="epoch"):
        student.train()
        perm = torch.randperm(len(train), generator=gen)
        for start in range(0, len(perm), cfg.batch_size):
            x = train[perm[start : start + cfg.batch_size]]
            loss = alignment_loss(student, teacher, student_encode(x), teacher_encode(x), cfg)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            sched.step()
        value = held_out_loss()
        log.append({"epoch": epoch + 1, "held_out_alignment_loss": value})
        if value < best - 1e-5:
            best, bad = value, 0
            best_state = {k: v.detach().clone() for k, v in student.state_dict().items()}
        else:
            bad += 1
            if bad >= cfg.patience:
                break
    if best_state is not None:
        student.load_state_dict(best_state)
    student.eval()
    return {"best_held_out_alignment_loss": best, "epochs": len(log), "log": log}
