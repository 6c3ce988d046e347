"""GridPG protocol choices in the suite's hook: no smoothing for coarse methods, the ViT window override."""

import pytest
import torch

from faithbench.attributions import get_method
from faithbench.config import from_table
from faithbench.errors import UserError
from faithbench.metrics.gridpg import GridPGConfig, PreparedGrids, evaluate
from faithbench.metrics.spec import Unit
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import normalized
from tests.helpers import small_cnn


def unit_with_grids(method_name: str, cfg: GridPGConfig) -> Unit:
    model = ModelAdapter(
        "cnn", "standard", small_cnn(classes=4), normalized((0.5,), (0.5,)), 4, (28, 28), conv_layer="0"
    )
    unit = Unit(
        model=model,
        method=get_method(method_name),
        images=torch.rand(8, 1, 28, 28),
        labels=torch.arange(8) % 4,
        sample_ids=torch.arange(4),
        batch_size=4,
        device=torch.device("cpu"),
    )
    grids = torch.rand(1, 1, 56, 56)
    info = {
        "preset": cfg.preset,
        "grid_size": 2,
        "vit_windows": "none",
        "smooth": 3,
        "n_grids": 1,
        "n_candidates": 8,
        "n_dropped": 0,
    }
    unit.model_cache[("gridpg", cfg)] = PreparedGrids(grids, torch.tensor([[0, 1, 2, 3]]), info)
    return unit


def test_gradcam_is_not_smoothed_and_other_methods_are():
    cfg = GridPGConfig()
    assert evaluate(unit_with_grids("gradcam", cfg), cfg).params["smooth"] == 1  # TPAMI Sec. 4
    assert evaluate(unit_with_grids("gradient", cfg), cfg).params["smooth"] == 3


def test_vit_windows_override_keeps_the_rest_of_the_preset():
    default = GridPGConfig(preset="bcos-v2")
    whole = GridPGConfig(preset="bcos-v2", vit_windows="none")
    assert default.effective_preset().vit_windows == "sum-padded"
    assert whole.effective_preset().vit_windows == "none"
    assert whole.effective_preset().tiling == default.effective_preset().tiling
    with pytest.raises(UserError, match="vit_windows"):
        from_table(GridPGConfig, {"vit_windows": "sideways"}, "[gridpg]")
