"""Errors that blame the right part: a method's wrong-sized or NaN maps name the method and the model; NaN maps of a
model whose logits are NaN name the model."""

from __future__ import annotations

import pytest
import torch

from faithbench.attributions import AttributionMethod
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import InputEncoding


class _Net(torch.nn.Module):
    def __init__(self, nan: bool = False) -> None:
        super().__init__()
        self.head = torch.nn.Linear(16, 3)
        self.nan = nan

    def forward(self, x):
        out = self.head(x.flatten(1))
        return out * float("nan") if self.nan else out


class _Maps(AttributionMethod):
    name, description, defaults = "mine", "a user's method", {"kind": "ok"}

    def _attribute(self, model, inputs, targets):
        if self.params["kind"] == "small":
            return inputs[:, 0, :2, :2]
        if self.params["kind"] == "nan":
            return inputs[:, 0] * float("nan")
        return model.module(inputs).sum() * 0 + inputs[:, 0]  # NaN exactly where the logits are


def _model(nan: bool = False) -> ModelAdapter:
    return ModelAdapter(name="net", family="standard", module=_Net(nan), encoding=InputEncoding("identity", 1),
                        num_classes=3, input_size=(4, 4))  # fmt: skip


def test_each_fault_names_its_part():
    x, t = torch.rand(2, 1, 4, 4), torch.tensor([0, 1])
    assert _Maps().attribute(_model(), x, t).shape == (2, 4, 4)
    with pytest.raises(ValueError, match=r"method 'mine' returned maps of shape \(2, 2, 2\) for inputs \(2, 1, 4, 4\) "
                       r"of model 'net'; expected \(2, 4, 4\)"):  # fmt: skip
        _Maps(kind="small").attribute(_model(), x, t)
    with pytest.raises(ValueError, match=r"method 'mine' returned NaN/inf maps for 2 of 2 inputs of model 'net'"):
        _Maps(kind="nan").attribute(_model(), x, t)
    with pytest.raises(ValueError, match=r"model 'net' has non-finite logits: NaN/inf maps for 2 of 2 inputs"):
        _Maps().attribute(_model(nan=True), x, t)
