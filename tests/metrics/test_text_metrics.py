"""The text metrics through the runner's hooks, on a hand-built bag-of-words model with known answers."""

import math
from dataclasses import replace

import pytest
import torch

from faithbench.attributions import get_method
from faithbench.metrics.baselines import BaselineConfig, unit_baseline
from faithbench.metrics.erasure import ErasureConfig
from faithbench.metrics.registry import METRICS
from faithbench.metrics.seqpg import SeqPGConfig
from faithbench.metrics.spec import Unit
from tests.text_helpers import CLASS0, CLASS1, bag_of_words, sentence


def unit_of(model, method: str, rows: list[list[int]], labels: list[int]) -> Unit:
    ids = torch.tensor(rows)
    return Unit(
        model=model,
        method=get_method(method),
        images=ids,
        labels=torch.tensor(labels),
        sample_ids=torch.arange(len(rows)),
        batch_size=8,
        device=torch.device("cpu"),
    )


def evaluate(metric: str, unit: Unit, cfg=None):
    spec = METRICS.get(metric)
    return spec.evaluate(unit, cfg if cfg is not None else spec.config())


def p0(logits: list[float]) -> float:
    return torch.tensor(logits).softmax(0)[0].item()


def segments_data(per_class: int = 3, length: int = 4):
    """``per_class`` texts of each class, each ``length`` + 1 words of its class; padded to one width."""
    rows = [sentence(*[CLASS0 + i] * (length + 1)) for i in range(per_class)]
    rows += [sentence(*[CLASS1 + i] * (length + 1)) for i in range(per_class)]
    return rows, [0] * per_class + [1] * per_class


@pytest.mark.parametrize(("method", "expected"), [("input_x_gradient", 1.0), ("native", 1.0), ("gradient", 0.5)])
def test_seqpg_known_answers(method, expected):
    # Each segment's class is voted for only by its own words: x * gradient puts all positive mass there (1);
    # the gradient is the same at every token (one-hot of the class), a uniform map: 1 / 2.
    rows, labels = segments_data()
    result = evaluate("seqpg", unit_of(bag_of_words(), method, rows, labels), SeqPGConfig(segment_length=4))
    assert result.params["n_sequences_built"] == 3 and result.params["n_long_enough"] == 6
    assert len(result.values) == 6 and sorted(result.sample_ids.tolist()) == list(range(6))
    torch.testing.assert_close(result.values, torch.full((6,), expected))


def test_seqpg_counts_only_confident_correct_segments_and_records_none_built():
    rows, labels = segments_data()
    wrong = [1 - y for y in labels]  # every segment misclassified: no sequence
    result = evaluate("seqpg", unit_of(bag_of_words(), "native", rows, wrong), SeqPGConfig(segment_length=4))
    assert result.params["n_sequences_built"] == 0 and len(result.values) == 0
    short = evaluate("seqpg", unit_of(bag_of_words(), "native", rows, labels), SeqPGConfig(segment_length=6))
    assert short.params["n_long_enough"] == 0 and len(short.values) == 0


def test_seqpg_shards_cover_every_segment_once():
    rows, labels = segments_data(per_class=5)
    parts = []
    for rank in range(2):
        unit = unit_of(bag_of_words(), "input_x_gradient", rows, labels)
        unit.rank, unit.world = rank, 2
        parts.append(evaluate("seqpg", unit, SeqPGConfig(segment_length=4)).sample_ids)
    assert sorted(torch.cat(parts).tolist()) == list(range(10))


@pytest.mark.parametrize(
    ("baseline", "removed", "kept_only"),
    [
        # [CLS] a a b [SEP]: the top token (the first a) replaced; then all but it. [MASK] votes (0, 3).
        ("mask-token", [1.002, 4.002], [1.002, 6.002]),
        ("pad-token", [1.002, 1.002], [1.002, 0.002]),
    ],
)
def test_comprehensiveness_and_sufficiency_known_answers(baseline, removed, kept_only):
    unit = unit_of(bag_of_words(), "input_x_gradient", [sentence(CLASS0, CLASS0, CLASS1)], [0])
    cfg = ErasureConfig(summary="eraser", baseline=baseline)
    original = p0([2.002, 1.002])
    comp = evaluate("comprehensiveness", unit, cfg)
    suff = evaluate("sufficiency", unit, cfg)
    # n = 3 tokens ([CLS] / [SEP] are not features): k = max(1, floor(3 r)) = 1 at every ERASER fraction.
    assert comp.values.item() == pytest.approx(original - p0(removed), abs=1e-6)
    assert suff.values.item() == pytest.approx(original - p0(kept_only), abs=1e-6)


def test_comp_and_suff_use_softmax_for_every_model_and_the_models_own_sigmoid_only_when_asked():
    """B-cos LM code: p is the softmax over the classes, B-cos models included; ``probability = "model"`` uses the
    model's activation. [CLS] a a b [SEP] with the top token masked: logits (2.002, 1.002) -> (1.002, 4.002)."""
    sigmoid_model = replace(bag_of_words(), activation="sigmoid")
    unit = unit_of(sigmoid_model, "input_x_gradient", [sentence(CLASS0, CLASS0, CLASS1)], [0])
    softmax = evaluate("comprehensiveness", unit, ErasureConfig(baseline="mask-token"))
    assert softmax.values.item() == pytest.approx(p0([2.002, 1.002]) - p0([1.002, 4.002]), abs=1e-6)  # 0.684
    assert softmax.params["probability"] == "softmax"
    unit = unit_of(sigmoid_model, "input_x_gradient", [sentence(CLASS0, CLASS0, CLASS1)], [0])
    own = evaluate("comprehensiveness", unit, ErasureConfig(baseline="mask-token", probability="model"))
    sigmoid = torch.tensor([2.002, 1.002]).sigmoid()
    assert own.values.item() == pytest.approx((sigmoid[0] - sigmoid[1]).item(), abs=1e-6)  # 0.150: another number
    with pytest.raises(ValueError, match="unknown probability 'sigmoid'; valid choices: 'softmax', 'model'"):
        ErasureConfig(baseline="mask-token", probability="sigmoid")


def test_text_models_refuse_image_baselines_and_images_refuse_token_baselines():
    unit = unit_of(bag_of_words(), "input_x_gradient", [sentence(CLASS0)], [0])
    with pytest.raises(ValueError, match="valid: mask-token, pad-token"):
        unit_baseline(unit, BaselineConfig(baseline="mean"), torch.tensor([0]))


def test_entropy_counts_only_tokens_and_the_positive_variant_only_positive_mass():
    # x * gradient for class 0 on [CLS] a a b [SEP]: a = 1, a = 1, b = 0, [CLS] / [SEP] = 1e-3 (not features).
    unit = unit_of(bag_of_words(), "input_x_gradient", [sentence(CLASS0, CLASS0, CLASS1)], [0])
    assert evaluate("entropy", unit).values.item() == pytest.approx(math.log(2), abs=1e-6)
    assert evaluate("entropy_positive", unit).values.item() == pytest.approx(math.log(2), abs=1e-6)
    assert evaluate("entropy_normalised", unit).values.item() == pytest.approx(math.log(2) / math.log(3), abs=1e-6)
    # class 1: b = 1 is the only positive token, so the positive entropy is 0
    unit1 = unit_of(bag_of_words(), "input_x_gradient", [sentence(CLASS0, CLASS0, CLASS1)], [1])
    assert evaluate("entropy_positive", unit1).values.item() == pytest.approx(0.0, abs=1e-6)


def test_native_token_contributions_are_complete_on_the_hand_built_model():
    unit = unit_of(bag_of_words(), "native", [sentence(CLASS0, CLASS1, CLASS1, length=7)], [1])
    assert abs(evaluate("completeness_gap", unit).values.item()) < 1e-6


def test_seqpg_sentence_pair_input_separates_the_segments_as_the_seed_code():
    from faithbench.metrics.seqpg import prepare_sequences

    rows, labels = segments_data()
    pair = prepare_sequences(unit_of(bag_of_words(), "native", rows, labels), SeqPGConfig(segment_length=4))
    outside = (pair.segment_ids[0] == -1).nonzero().flatten().tolist()
    assert pair.segment_ids.shape[1] == 11 and outside == [0, 5, 10]  # [CLS] s1 [SEP] s2 [SEP]
    flat = prepare_sequences(
        unit_of(bag_of_words(), "native", rows, labels), SeqPGConfig(segment_length=4, input_format="concatenated")
    )
    assert (flat.segment_ids[0] == -1).nonzero().flatten().tolist() == [0, 9]  # [CLS] s1 s2 [SEP]
    with pytest.raises(ValueError, match="input_format"):
        SeqPGConfig(input_format="pairs")


def test_seqpg_rows_of_two_models_share_sequence_ids_when_one_model_chooses_the_segments():
    from faithbench.bench.run.pairing import SharedItems
    from faithbench.metrics.seqpg import pairing_models, segment_confidence

    rows, labels = segments_data(per_class=4)
    cfg = SeqPGConfig(segment_length=4, sequences_from="reference")
    assert pairing_models(cfg, {"a": "bcos", "b": "standard"}) == ("reference",)
    assert pairing_models(SeqPGConfig(sequences_from="per-model"), {"a": "standard"}) == ()
    reference = bag_of_words()
    eligible, score = segment_confidence(reference, torch.tensor(rows), torch.tensor(labels), cfg, "cpu", 8)
    assert eligible.all()
    eligible[[0, 5]] = False  # the reference is unsure of two texts: no model may use them
    shared = {"seqpg": SharedItems(("reference",), eligible, score, {})}
    results = []
    for vote in ((0.0, 3.0), (0.0, 0.5)):  # two models that differ
        unit = unit_of(bag_of_words(mask_vote=vote), "native", rows, labels)
        unit.shared = shared
        results.append(evaluate("seqpg", unit, cfg))
    assert torch.equal(results[0].sample_ids, results[1].sample_ids) and len(results[0].sample_ids) == 6
    assert results[0].params["sequences_from"] == "reference" and results[0].params["n_confident"] == 6
    own = evaluate("seqpg", unit_of(bag_of_words(), "native", rows, labels), SeqPGConfig(segment_length=4))
    assert own.params["sequences_from"] == "per-model" and len(own.sample_ids) == 8


def test_seqpg_sequences_default_to_the_suites_conventional_model_and_an_all_bcos_suite_must_name_one():
    from faithbench.errors import UserError
    from faithbench.metrics.seqpg import pairing_models

    models = {"bcos_a": "bcos", "conv_a": "standard", "conv_b": "standard"}
    assert pairing_models(SeqPGConfig(), models) == ("conv_a",)  # B-cos LM App. E: the conventional model decides
    with pytest.raises(UserError, match='sequences_from = "MODEL"') as info:
        pairing_models(SeqPGConfig(), {"bcos_a": "bcos", "bcos_b": "bcosified"})
    assert "bcos_a, bcos_b" in str(info.value) and "per-model" in str(info.value) and "\n" not in str(info.value)
    assert pairing_models(SeqPGConfig(sequences_from="outside"), {"bcos_a": "bcos"}) == ("outside",)


def test_a_text_suite_whose_models_are_all_bcos_is_refused_before_any_folder_exists(tmp_path, capsys):
    from faithbench.bench.cli import main

    suite = tmp_path / "bcos-only.toml"
    suite.write_text(
        'name = "bcos-only"\ndataset = "rotten-tomatoes"\nmodels = ["bcos_minilm1_rt"]\nmethods = ["native"]\n'
        'metrics = ["seqpg"]\ncontrols = false\n'
    )
    out = tmp_path / "run"
    assert main(["run", "--suite", str(suite), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: [seqpg] needs a conventional model") and err.count("\n") == 1
    assert not out.exists()
    suite.write_text(suite.read_text() + '\n[seqpg]\nsequences_from = "minilm1_rt"\n')
    assert main(["run", "--suite", str(suite), "--out", str(out), "--dry-run"]) == 0
