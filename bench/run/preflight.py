"""Checks before compute: what a run needs that can be looked at without running it, checked before the run makes
its folder (a wrong path leaves nothing behind) and listed by ``run --dry-run``.

* the environment's settings (``FAITHBENCH_CLAIM_STALE_S``, ``FAITHBENCH_PROGRESS_EVERY``);
* the data: the data set's own look (``DatasetSpec.check``: a data root that exists and holds class folders of
  images), nothing decoded, and a ``class_index`` that can label them;
* the weights of every pretrained model (``ModelSpec.weight_file``): where absent, the run lets the model's loader
  try first (online it downloads; offline it stops with one line naming the file and its folder);
* the zoo models still to build (trained on this machine before the first unit): listed, not refused.
"""

from __future__ import annotations

from pathlib import Path

from faithbench.bench.run.suite import Suite
from faithbench.bench.store.claims import stale_after
from faithbench.errors import UserError
from faithbench.models import MODELS, load_model, zoo
from faithbench.models.checkpoints.weight_files import WeightFile
from faithbench.models.data.datasets import CLASS_INDEX, DATASETS
from faithbench.progress import progress_every


def setting_problems(suites: list[Suite]) -> list[str]:
    """One line per environment setting (read once) or suite data setting that would stop the run."""
    problems = []
    for read in (stale_after, progress_every):
        try:
            read()
        except UserError as exc:
            problems.append(str(exc))
    for suite in suites:
        spec = DATASETS.get(suite.dataset)
        try:
            if spec.check is not None:
                spec.check(suite.data_root)
        except UserError as exc:
            problems.append(f"{suite.name}: {exc}")
        if suite.class_index != "auto" and not spec.class_folders:
            problems.append(f"{suite.name}: class_index applies to class-folder data (imagefolder), not {spec.name!r}")
        elif suite.class_index not in CLASS_INDEX and not Path(suite.class_index).expanduser().is_file():
            problems.append(
                f"{suite.name}: class_index {suite.class_index!r} is none of {', '.join(CLASS_INDEX)} and no file "
                "(one class folder name per line, line i = class index i)"
            )
    return problems


def absent_weights(models: tuple[str, ...] | list[str]) -> dict[str, WeightFile]:
    """The pretrained models among ``models`` whose weight file is not on this machine, with where it goes."""
    out = {}
    for name in dict.fromkeys(models):
        where = MODELS.get(name).weight_file
        if where is not None and not (file := where()).present:
            out[name] = file
    return out


def weight_lines(models: tuple[str, ...] | list[str]) -> list[str]:
    """One line per absent weight file: what it is, where it goes, how to get it there."""
    return [
        f"model {name}: weights not on this machine ({f.path}): {f.fetch}" for name, f in absent_weights(models).items()
    ]


def build_lines(models: tuple[str, ...] | list[str]) -> list[str]:
    """The zoo builds still to come before the first unit (trained here, cached), as one line (none: empty)."""
    todo = zoo.missing(models)
    if not todo:
        return []
    return [f"zoo models to build first ({len(todo)}; trained on this machine, then cached): {', '.join(todo)}"]


def check_before_compute(suites: list[Suite]) -> None:
    """Refuse, before any folder is made, a run whose settings or data root would stop it (every problem, one line
    each); a pretrained model whose weights are absent is loaded here, so its loader downloads them or says where
    they go."""
    problems = setting_problems(suites)
    if problems:
        raise UserError("\n".join(problems))
    for name in absent_weights([m for suite in suites for m in suite.models]):
        load_model(name)  # online: downloads; offline: the loader's one line (the file and its folder)


def readiness(suites: list[Suite]) -> tuple[list[str], list[str], list[str]]:
    """For ``run --dry-run``: (the settings and data roots that would stop the run here, the absent weight files, the
    zoo builds the run does first)."""
    models = [m for suite in suites for m in suite.models]
    return setting_problems(suites), weight_lines(models), build_lines(models)
