"""Controls of the ground-truth tier: a hand-set model's exact attribution, and planted unfaithful versions of it.

Models whose attribution is known by construction carry it (``ModelAdapter.truth``;
:mod:`faithbench.models.truth.image_exact`).
These methods explain such a model with that truth, or with a corruption of it, so every metric can be asked whether
it tells the faithful map from the unfaithful ones (the report card's AUROC):

- ``truth``: the exact attribution itself;
- ``truth_shifted``: the truth moved by half the image in both directions (on the 4 x 4 board: every weighted cell
  onto a distractor cell), values unchanged; on a token model each sentence's word truths rolled by half its number
  of words (``models.truth_text.roll_features``: the evidence onto other words, mostly distractors);
- ``truth_other_class``: the exact attribution of the next class, ``(target + 1) mod K``: faithful to the model, but
  to the wrong logit;
- ``truth_negated``: minus the truth.

Other models are refused before any compute.
"""

from __future__ import annotations

import torch
from torch import Tensor

from faithbench.attributions.base import AttributionMethod, Capabilities, no_model_input
from faithbench.models.adapter import ModelAdapter
from faithbench.models.truth.token_exact import roll_features, token_features

TRUTH_CONTROLS = ("truth", "truth_shifted", "truth_other_class", "truth_negated")
TRUTH_CORRUPTIONS = TRUTH_CONTROLS[1:]


class TruthControl(AttributionMethod):
    name = "truth"
    description = "control: the exact attribution of a hand-set model (the ground-truth tier)"
    capabilities = Capabilities(text=True)
    model_inputs_per_explanation = no_model_input  # the truth is computed from the weights, not by a forward pass

    def _check(self, model: ModelAdapter) -> None:
        if model.truth is None:
            self._unsupported(model, "its attribution is not known (the hand-set models of the ground-truth tier)")

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return self._corrupt(model, inputs, targets).to(inputs.dtype)

    def _corrupt(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return model.truth(inputs, targets)


class TruthShifted(TruthControl):
    name = "truth_shifted"
    description = (
        "control: the exact attribution moved by half the image (weighted cells onto distractor cells; text: rolled "
        "by half the sentence's words)"
    )

    def _corrupt(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        truth = model.truth(inputs, targets)
        if model.modality == "text":
            return roll_features(truth, token_features(inputs))
        return torch.roll(truth, shifts=(truth.shape[-2] // 2, truth.shape[-1] // 2), dims=(-2, -1))


class TruthOtherClass(TruthControl):
    name = "truth_other_class"
    description = "control: the exact attribution of the next class, (target + 1) mod K"

    def _corrupt(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return model.truth(inputs, (targets + 1) % model.num_classes)


class TruthNegated(TruthControl):
    name = "truth_negated"
    description = "control: minus the exact attribution"

    def _corrupt(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return -model.truth(inputs, targets)


TRUTH_METHODS: tuple[type[AttributionMethod], ...] = (TruthControl, TruthShifted, TruthOtherClass, TruthNegated)
