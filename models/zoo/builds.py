"""Further builds of a zoo model: ``NAME@K`` (K = 2, 3, ...) is recipe ``NAME`` trained again with every seed of its
parameters shifted by K - 1 (weight initialisation, data order, augmentation), from build K of each zoo model it
builds on (a B-cosified model's build 2 fine-tunes build 2 of its standard model). ``NAME`` itself is build 1, so
nothing that names it changes. A suite's ``builds = N`` runs builds 1 .. N of its zoo models; the claims' intervals
then add the spread between training runs to the items' (faithbench.bench.report.claim_builds)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from faithbench.build_names import SEPARATOR, build_name, split_build
from faithbench.errors import UserError
from faithbench.models.zoo.recipes import Recipe

__all__ = ["SEPARATOR", "build_name", "build_of", "derived_recipe", "init_seed", "split_build", "with_builds"]


def _reseeded(params: Any, offset: int) -> Any:
    """``params`` with every integer ``seed`` (nested ones too: an alignment's) shifted by ``offset``."""
    if isinstance(params, dict):
        return {
            k: v + offset if k == "seed" and isinstance(v, int) and not isinstance(v, bool) else _reseeded(v, offset)
            for k, v in params.items()
        }
    return params


def build_of(recipe: Recipe, k: int) -> Recipe:
    """Build ``k`` of ``recipe``: its seeds shifted by k - 1, from build ``k`` of what it builds on."""
    if k == 1:
        return recipe
    return replace(
        recipe,
        name=build_name(recipe.name, k),
        params=_reseeded(recipe.params, k - 1),
        depends=tuple(build_name(d, k) for d in recipe.depends),
        description=f"{recipe.description} (build {k}: seeds + {k - 1})",
    )


def _seeded(params: Any) -> bool:
    if isinstance(params, dict):
        return any((k == "seed" and isinstance(v, int)) or _seeded(v) for k, v in params.items())
    return False


def derived_recipe(recipes: Any, name: str) -> Recipe | None:
    """The recipe of ``NAME@K`` for a registered ``NAME`` that trains from a seed, or None (``recipes``: the zoo's
    registry; a shipped pretrained model has no further builds)."""
    base, k = split_build(name)
    if k < 2 or SEPARATOR in base or base not in recipes or not _seeded(recipes.get(base).params):
        return None
    return build_of(recipes.get(base), k)


def init_seed(recipe: Recipe) -> int:
    """The seed a recipe's architecture is initialised with: its own ``seed`` (0 for every build 1)."""
    seed = recipe.params.get("seed", 0)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


def with_builds(models: tuple[str, ...], builds: int, known: Callable[[str], bool], where: str) -> tuple[str, ...]:
    """Each model followed by its builds 2 .. ``builds`` (``NAME@K``), once each (a recorded suite lists them
    already); a model without further builds (not trained from a seed in the zoo) is refused."""
    if builds == 1:
        return models
    out: list[str] = []
    for m in models:
        out.append(m)
        if split_build(m)[1] != 1:
            continue
        more = [build_name(m, k) for k in range(2, builds + 1)]
        if not known(more[0]):
            raise UserError(
                f"{where} builds = {builds}: model {m!r} has no further builds (only zoo models trained from a seed "
                "do); list it in a suite without builds"
            )
        out.extend(more)
    return tuple(dict.fromkeys(out))
