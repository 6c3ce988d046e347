"""Where each pretrained model's library reads its weights from, so a run can check them before any compute.

A registry model's ``ModelSpec.weight_file`` returns a :class:`WeightFile`: the file (or Hugging Face cache folder)
its loader reads and how to get it there. ``present`` is a look at the disk, nothing is loaded; where it is absent
the loader itself still runs first (online it downloads; offline it stops with the same one line), before the run
makes its folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from faithbench.models.checkpoints import bcosified_hub
from faithbench.models.checkpoints.hub import BCOS_HUB, hf_hub_cache


@dataclass(frozen=True)
class WeightFile:
    """``path``: what the loader reads; ``fetch``: how to put it there (a URL and a folder, or a command)."""

    path: Path
    fetch: str

    @property
    def present(self) -> bool:
        return self.path.exists()


def _hub_file(url: str) -> WeightFile:
    folder = Path(torch.hub.get_dir()) / "checkpoints"  # torch.hub names the file after the URL's last part
    return WeightFile(folder / os.path.basename(url), f"download {url} into {folder}/")


def torchvision_file(arch: str, weights: str = "DEFAULT") -> Callable[[], WeightFile]:
    def where() -> WeightFile:
        import torchvision

        return _hub_file(torchvision.models.get_model_weights(arch)[weights].url)

    return where


def bcos_hub_file(entry: str) -> Callable[[], WeightFile]:
    def where() -> WeightFile:
        from bcos.models import pretrained as hub

        base, experiment = BCOS_HUB[entry]
        return _hub_file(hub.URLS[base][experiment])

    return where


def bcosified_file(name: str) -> Callable[[], WeightFile]:
    def where() -> WeightFile:
        path = bcosified_hub.checkpoint_path(bcosified_hub.BCOSIFIED[name])
        return WeightFile(
            Path(path),
            f"download its asset from {bcosified_hub.RELEASE_PAGE} and save it as that file (or set "
            "FAITHBENCH_BCOSIFICATION_DIR to a copy of the release's experiments/ folder)",
        )

    return where


def hugging_face_folder(repo: str) -> Callable[[], WeightFile]:
    def where() -> WeightFile:
        folder = Path(hf_hub_cache()) / f"models--{repo.replace('/', '--')}"
        return WeightFile(
            folder, f"on a machine with internet run `huggingface-cli download {repo}`, copy it to {folder}"
        )

    return where
