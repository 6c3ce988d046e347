"""BERT-family checkpoints as TextTransformers: the forward matches transformers' own, per family, on small random
models built from configs (no download); the B-cos LM conversion and its completeness carry over; offline, the
checkpoint path stops in one line naming the checkpoint."""

import pytest
import torch
import transformers

from faithbench.errors import UserError
from faithbench.models.checkpoints.hf_bert import (
    CHECKPOINTS,
    from_hf_model,
    geometry,
    pretrained_transformer,
    tokenizer_file,
)
from faithbench.models.nets.bcos_text import bcos_text_transformer
from faithbench.models.text_encoding import Vocabulary
from tests.models.test_bcos_text import token_contributions

SMALL = {"vocab_size": 60, "max_position_embeddings": 24}
CONFIGS = {
    "bert": lambda: transformers.BertConfig(
        **SMALL, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48
    ),
    "distilbert": lambda: transformers.DistilBertConfig(**SMALL, dim=32, n_layers=2, n_heads=4, hidden_dim=48),
    "roberta": lambda: transformers.RobertaConfig(
        **SMALL,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        type_vocab_size=1,
        pad_token_id=1,
        layer_norm_eps=1e-5,
    ),
}
PAD = {"bert": 0, "distilbert": 0, "roberta": 1}


def hf_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = CONFIGS[kind]()
    config._attn_implementation = "eager"
    model = transformers.AutoModel.from_config(config).eval()
    with torch.no_grad():  # non-trivial LayerNorm affines and biases, so a mapping slip shows
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def batch(kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, 60, (3, 10), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    ids[1, 7:], mask[1, 7:] = PAD[kind], 0
    return ids, mask


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_the_encoder_matches_transformers(kind):
    reference = hf_model(kind)
    ours = from_hf_model(reference, num_classes=3, seed=0)
    ids, mask = batch(kind)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours.encode(ours.embed(ids), mask)
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], rtol=1e-4, atol=2e-5)
    if kind == "bert":  # BERT's classification head reuses the pretrained pooler
        torch.testing.assert_close(
            ours.pooler_act(ours.pooler(got[:, 0])),
            reference.pooler.activation(reference.pooler.dense(expected[:, 0])),
            rtol=1e-4,
            atol=2e-5,
        )


def test_new_parameters_are_seeded_and_distilbert_pools_with_relu():
    reference = hf_model("distilbert")
    a, b = from_hf_model(reference, 4, seed=1), from_hf_model(reference, 4, seed=1)
    torch.testing.assert_close(a.classifier.weight, b.classifier.weight)
    torch.testing.assert_close(a.pooler.weight, b.pooler.weight)
    assert not torch.equal(a.classifier.weight, from_hf_model(reference, 4, seed=2).classifier.weight)
    assert isinstance(a.pooler_act, torch.nn.ReLU) and a.token_type_embeddings.weight.abs().max() == 0


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_the_b_cos_conversion_of_a_checkpoint_is_complete(kind):
    bcos = bcos_text_transformer(from_hf_model(hf_model(kind), num_classes=2), b=1.5)
    assert not [n for n, _ in bcos.named_parameters() if n.endswith("bias")]
    ids, mask = batch(kind)
    contributions, logits = token_contributions(bcos, ids, mask, target=1)
    torch.testing.assert_close(contributions.sum(1), logits[:, 1], rtol=1e-4, atol=1e-5)


def test_the_published_geometries_are_what_their_configs_give():
    bert = transformers.BertConfig()  # transformers' defaults are bert-base's
    assert geometry(bert) == CHECKPOINTS["bert-base-uncased"].geometry
    distil = transformers.DistilBertConfig()
    assert geometry(distil) == CHECKPOINTS["distilbert-base-uncased"].geometry
    roberta = transformers.RobertaConfig(
        vocab_size=50265, max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1
    )
    assert geometry(roberta) == CHECKPOINTS["roberta-base"].geometry


def test_roberta_special_tokens_are_found():
    from tokenizers import Tokenizer, models

    tokenizer = Tokenizer(models.WordLevel({"<s>": 0, "<pad>": 1, "</s>": 2, "<mask>": 3, "a": 4}, unk_token="a"))
    assert Vocabulary.of(tokenizer, "roberta-base") == Vocabulary(0, 2, 1, 3, "roberta-base")
    with pytest.raises(ValueError, match="neither"):
        Vocabulary.of(Tokenizer(models.WordLevel({"a": 0}, unk_token="a")), "odd")


def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("repo", list(CHECKPOINTS))
def test_a_missing_checkpoint_offline_is_one_line_naming_it(monkeypatch, tmp_path, repo):
    offline(monkeypatch, tmp_path)
    with pytest.raises(UserError) as err:
        pretrained_transformer(repo, num_classes=2)
    message = str(err.value)
    assert "\n" not in message and f"huggingface-cli download {repo}" in message and str(tmp_path) in message
    with pytest.raises(UserError, match=f"download {repo}"):
        tokenizer_file(repo)


def test_building_a_checkpoint_recipe_offline_stops_in_one_line(monkeypatch, tmp_path, capsys):
    from faithbench.bench.cli import main

    offline(monkeypatch, tmp_path)
    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FAITHBENCH_DEBUG", raising=False)
    assert main(["zoo", "bert_agnews"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the zoo's "building bert_agnews" line
    assert (
        last.startswith("error: checkpoint bert-base-uncased") and "huggingface-cli download bert-base-uncased" in last
    )


def cache_checkpoint(hf_home, repo: str, model, tokenizer_json) -> None:
    """``model`` saved where huggingface_hub looks for ``repo`` (hub/models--REPO/snapshots/COMMIT + refs/main)."""
    commit = "0" * 40
    folder = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    model.save_pretrained(folder / "snapshots" / commit)
    (folder / "snapshots" / commit / "tokenizer.json").write_bytes(tokenizer_json.read_bytes())
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)


def test_a_cached_checkpoint_is_read_offline_and_checked_against_the_published_geometry(monkeypatch, tmp_path):
    from faithbench.models.nets.text_transformer import minilm_folder

    offline(monkeypatch, tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE")  # require() finds it cached and sets the offline variables itself
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    cache_checkpoint(tmp_path, "bert-base-uncased", hf_model("bert"), minilm_folder() / "tokenizer.json")
    assert tokenizer_file("bert-base-uncased").read_bytes() == (minilm_folder() / "tokenizer.json").read_bytes()
    with pytest.raises(UserError, match=r"geometry \{'vocab_size': 60, 'dim': 32.*not the published"):
        pretrained_transformer("bert-base-uncased", num_classes=2)


def test_the_embedding_adapter_of_a_roberta_model_pads_with_its_own_id():
    from faithbench.models.text_encoding import EmbeddingClassifier, TokenEncoding

    model = from_hf_model(hf_model("roberta"), num_classes=2)
    vocab = Vocabulary(cls=0, sep=2, pad=1, mask=3, tokenizer="roberta-base")
    classifier = EmbeddingClassifier(model)
    encoding = TokenEncoding("roberta-embeddings", classifier, vocab)
    ids, mask = batch("roberta")
    ids[:, 0], ids[0, -1], ids[1, 6] = vocab.cls, vocab.sep, vocab.sep
    embedded = encoding(ids)
    assert embedded[1, :, 7:].abs().max() == 0 and embedded[1, :, :7].abs().sum(0).min() > 0
    with torch.no_grad():
        torch.testing.assert_close(classifier(embedded), model(ids, mask), rtol=1e-4, atol=1e-5)
    assert encoding.feature_mask(ids)[1].tolist() == [False] + [True] * 5 + [False] * 4
    assert set(encoding.masked(ids)[1].tolist()) == {vocab.mask, vocab.pad}


def test_zoo_text_builds_no_gpu_preset_and_no_checkpoint_recipe(monkeypatch, capsys):
    from faithbench.bench.cli import main
    from faithbench.bench.cli import zoo as zoo_report

    built = []
    monkeypatch.setattr(zoo_report, "zoo_rows", lambda names, n_grids: built.extend(names) or [])
    monkeypatch.setattr(zoo_report, "zoo_table", lambda rows: "")
    assert main(["zoo", "--text"]) == 0
    assert "minilm_rt" in built and "bcos_minilm3_rt_b2_5" in built
    assert not [n for n in built if n.endswith("_gpu") or "bert" in n], built


def test_every_offline_text_recipe_starts_from_weights_that_fit_its_architecture():
    from faithbench.models.zoo.text_recipes import TEXT_RECIPES, starting_point

    for recipe in TEXT_RECIPES:
        if not recipe.downloads:
            recipe.architecture().load_state_dict(starting_point(recipe.params).state_dict())
