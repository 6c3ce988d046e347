"""What a registry entry states of its model before it loads (``ModelSpec.facts``, read by a dry run's stand-ins)
is what the model is: the loaded adapter's facts, or its architecture's positional embedding where loading needs
weights this machine lacks."""

from __future__ import annotations

import pytest

from faithbench.bench.estimate.counts import GUESSED, estimate, stand_in
from faithbench.bench.run.plan import resolve
from faithbench.bench.run.suite import build_suite
from faithbench.models import MODELS, load_model, zoo
from faithbench.models.adapter import ModelFacts, ModelSpec, positional_embeddings
from faithbench.models.text_encoding import MAX_LENGTH


def test_every_registered_model_states_its_facts():
    assert [name for name, spec in MODELS.items() if spec.facts is None] == []


@pytest.mark.parametrize("name", [n for n, s in MODELS.items() if s.source == "hand-set" or n.endswith("_random")])
def test_a_model_built_without_a_download_is_what_its_entry_states(name):
    assert ModelFacts.of(load_model(name)) == MODELS.get(name).facts


def test_the_zoo_and_pretrained_architectures_are_what_their_entries_state():
    """Every zoo recipe's architecture (untrained), one pretrained entry per source that has one: ViT or CNN and the
    positional embedding the native methods count; a text model's input is the tokenizer's longest, within its
    positions."""
    for name in zoo.RECIPES:
        recipe, facts = zoo.RECIPES.get(name), MODELS.get(name).facts
        if recipe.downloads:
            continue
        arch = recipe.architecture()
        assert bool(positional_embeddings(arch)) == facts.positional_embedding == recipe.is_vit, name
        if recipe.modality == "text":
            assert facts.input_size == (MAX_LENGTH,) and MAX_LENGTH <= arch.max_length, name
    pretrained = ("resnet18", "vit_b_16", "bcos_simple_vit_ti_patch16_224", "bcos_resnet18", "bcosified_densenet121",
                  "bcosified_simple_vit_ti_patch16_224")  # fmt: skip
    for name in pretrained:
        if name not in MODELS:
            continue
        spec = MODELS.get(name)
        assert bool(positional_embeddings(spec.architecture())) == spec.facts.positional_embedding, name


def test_an_entry_without_facts_is_estimated_as_a_guess_that_says_so():
    """A plugin's registry entry that states nothing: the dry run counts it as a 224 px CNN and says it guessed."""
    known = MODELS.get("cnn_mnist")
    MODELS.register("factless", ModelSpec(name="factless", family="standard", source="user", description="",
                                          build=known.build, dataset="mnist"))  # fmt: skip
    try:
        suite = build_suite({"name": "t", "dataset": "mnist", "models": ["factless"], "methods": ["gradient"],
                             "metrics": ["pixel_deletion"], "n_samples": 4, "controls": False}, "test")  # fmt: skip
        cost = estimate(resolve(suite))
        assert stand_in("factless").input_size == (224, 224)
        assert GUESSED.format(name="factless") in cost.notes
    finally:
        MODELS.unregister("factless")
