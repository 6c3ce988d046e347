"""The token ground-truth tier: known answers that pin the exact token attribution of the hand-set classifiers."""

import copy
import math

import pytest
import torch

from faithbench.attributions import get_method
from faithbench.metrics.erasure import comprehensiveness_sufficiency
from faithbench.metrics.registry import METRICS
from faithbench.metrics.spec import Unit
from faithbench.metrics.truth_agreement import CORRELATION, MASS, TruthConfig, truth_correlation, truth_mass
from faithbench.models import MODELS, load_model
from faithbench.models.checkpoints.hf_bert import load_tokenizer
from faithbench.models.data.datasets import DATASETS
from faithbench.models.truth.token_data import MAX_TOKENS, lexicon_ids, truth_sentences
from faithbench.models.truth.token_exact import TableEncoding, TokenTruth, roll_features, token_features, token_truth
from faithbench.models.truth.token_nets import (
    ALPHA,
    CLASSES,
    FILLERS,
    GAMMA,
    KEYWORDS,
    LINEAR_WORDS,
    NEAR_MISS,
    NOISE_WORD,
    SUPPRESSOR_WORD,
    TAU,
    lexicon,
)

N = 48
MODEL = load_model("truth_tokens")
NOSUP = load_model("truth_tokens_nosup")
IDS, _ = lexicon_ids()
VOCAB = MODEL.encoding.vocab


def net64(model=MODEL):
    return copy.deepcopy(model.module).double()  # a float64 copy of the same weights


def row(*words):
    """[CLS] words [SEP] as a (1, T) id tensor."""
    return torch.tensor([[VOCAB.cls, *(IDS[w] for w in words), VOCAB.sep]])


def logits(net, x):
    with torch.no_grad():
        return net(x)


def coalition_values(net, x, baseline, target):
    """v(S) = f_target(x with the positions outside S replaced by ``baseline``) for every S (bit i: position i)."""
    t = x.shape[-1]
    masks = torch.tensor([[(s >> i) & 1 for i in range(t)] for s in range(2**t)], dtype=torch.bool)
    inputs = torch.where(masks[:, None, :], x, baseline)
    return logits(net, inputs)[:, target]


def exact_values(v, n):
    """(Shapley, Banzhaf, leave-one-out) of every player from the coalition values v (indexed by bitmask)."""
    shapley, banzhaf, loo = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64), []
    full = 2**n - 1
    for i in range(n):
        for s in range(2**n):
            if s >> i & 1:
                continue
            k = bin(s).count("1")
            gain = v[s | 1 << i] - v[s]
            shapley[i] += math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n) * gain
            banzhaf[i] += gain / 2 ** (n - 1)
        loo.append(v[full] - v[full & ~(1 << i)])
    return shapley, banzhaf, torch.stack(loo)


# ----------------------------------------------------------------------------- the truth is exact


@pytest.mark.parametrize("model", [MODEL, NOSUP], ids=["sup", "nosup"])
def test_truth_sums_to_the_logit_minus_the_logit_with_every_token_absent_for_every_class(model):
    net = net64(model)
    ids, _ = truth_sentences(N, seed=1)
    x = model.encode(ids).double()
    masked = model.encode(model.encoding.masked(ids, "mask")).double()  # every token [MASK]
    for c in range(len(CLASSES)):
        targets = torch.full((N,), c)
        truth = token_truth(net, x, targets)
        gain = logits(net, x)[:, c] - logits(net, torch.zeros_like(x))[:, c]
        torch.testing.assert_close(truth.sum(dim=1), gain, atol=1e-9, rtol=0)
        torch.testing.assert_close(
            truth.sum(dim=1), logits(net, x)[:, c] - logits(net, masked)[:, c], atol=1e-9, rtol=0
        )


@pytest.mark.parametrize("absent", ["zero", "mask"])
def test_token_truth_is_the_exact_shapley_banzhaf_and_leave_one_out_value(absent):
    net = net64()
    ids = row("election", "government", NOISE_WORD, SUPPRESSOR_WORD, "the", "country")  # 8 players, 256 coalitions
    x = MODEL.encode(ids).double()
    mask_row = MODEL.encode(torch.full_like(ids, VOCAB.mask)).double()
    baseline = torch.zeros_like(x) if absent == "zero" else mask_row
    for c in range(len(CLASSES)):
        truth = token_truth(net, x, torch.tensor([c]))[0]
        shapley, banzhaf, loo = exact_values(coalition_values(net, x, baseline, c), x.shape[-1])
        for values in (shapley, banzhaf, loo):
            torch.testing.assert_close(values, truth, atol=1e-9, rtol=0)
    truth = token_truth(net, x, torch.tensor([0]))[0]  # class world
    expected = [0, ALPHA * (1.0 - TAU), GAMMA * 0.4, GAMMA * 0.1, -GAMMA * 0.1, 0, 0, 0]
    torch.testing.assert_close(truth, torch.tensor(expected, dtype=torch.float64), atol=1e-7, rtol=0)


def test_every_word_contributes_what_its_role_says_and_distractors_exactly_zero():
    net = net64()
    for word in lexicon():
        x = MODEL.encode(row(word.word)).double()
        for c in range(len(CLASSES)):
            t = token_truth(net, x, torch.tensor([c]))[0]
            assert t[0] == 0 and t[2] == 0  # [CLS], [SEP]
            own = c == word.cls
            leak = 0.1 if c == 0 else -0.1 / 3  # GAMMA <t_c, u>, u = 0.1 l_0
            expected = {
                "keyword": ALPHA * (word.strength - TAU) if own else 0.0,
                "linear": GAMMA * word.strength * (1 if own else -1 / 3),
                "near_miss": 0.0,
                "noise": GAMMA * leak,
                "suppressor": -GAMMA * leak,
                "filler": 0.0,
            }[word.role]
            assert abs(float(t[1]) - expected) < 1e-6, (word, c)
            if word.role in ("near_miss", "filler"):
                assert t[1] == 0  # exactly: the ReLUs are shut or the kernels orthogonal


def test_special_tokens_and_mask_are_neutral_and_no_embedding_but_padding_is_zero():
    table = MODEL.module.embeddings
    specials = torch.tensor([VOCAB.cls, VOCAB.sep, VOCAB.mask])
    x = table[specials].T.unsqueeze(0).double()
    for c in range(len(CLASSES)):
        assert torch.equal(token_truth(net64(), x, torch.tensor([c])), torch.zeros(1, 3, dtype=torch.float64))
    norms = table.norm(dim=1)
    assert norms[VOCAB.pad] == 0 and (norms[torch.arange(len(table)) != VOCAB.pad] > 0.4).all()


def test_the_suppressor_cancels_the_noise_word_and_carries_no_class_information():
    ids, labels = truth_sentences(1000, seed=0)
    x = MODEL.encode(ids)
    noise, suppressor = (ids == IDS[NOISE_WORD]), (ids == IDS[SUPPRESSOR_WORD])
    assert torch.equal(noise.sum(1), suppressor.sum(1))  # always as many
    counts = [suppressor.sum(1)[labels == c].double().mean() for c in range(len(CLASSES))]
    assert max(counts) - min(counts) < 0.3  # independent of the class (mean 1.5 copies)
    for c in range(len(CLASSES)):
        t = MODEL.truth(x, torch.full((len(ids),), c))
        pair = (t * noise).sum(1) + (t * suppressor).sum(1)
        assert pair.abs().max() < 1e-6 and ((t * suppressor).sum(1) != 0).any()
    t = NOSUP.truth(NOSUP.encode(ids), labels)
    assert (t * suppressor).abs().max() == 0  # the control: a suppressor truth of exactly 0


def test_input_x_gradient_is_exact_on_linear_words_and_overshoots_keywords_integrated_gradients_converges():
    ids, labels = truth_sentences(N, seed=2)
    x = MODEL.encode(ids)
    truth = MODEL.truth(x, labels).float()
    ixg = get_method("input_x_gradient").attribute(MODEL, x, labels)
    keyword = torch.isin(ids, torch.tensor([IDS[w] for ws in KEYWORDS for w, _ in ws]))
    torch.testing.assert_close(ixg[~keyword], truth[~keyword], atol=1e-6, rtol=0)
    own = keyword & (truth > 0)
    torch.testing.assert_close(ixg[own] - truth[own], torch.full_like(truth[own], ALPHA * TAU), atol=1e-6, rtol=0)
    ig = get_method("integrated_gradients", n_steps=64).attribute(MODEL, x, labels)
    torch.testing.assert_close(ig, truth, atol=0.03, rtol=0)  # quadrature across the detectors' kink


@pytest.mark.parametrize("name", ["gradient", "input_x_gradient", "integrated_gradients", "lime", "shapley_sampling"])
def test_the_text_methods_explain_it_zero_on_padding(name):
    ids, labels = truth_sentences(6, seed=3)
    x = MODEL.encode(ids)
    params = {"n_samples": 16} if name in ("lime", "shapley_sampling") else {}
    maps = get_method(name, **params).attribute(MODEL, x, labels)
    assert maps.shape == ids.shape and torch.isfinite(maps).all()
    assert (maps[ids == VOCAB.pad] == 0).all()


def test_mask_token_and_pad_token_removal_give_the_same_comprehensiveness_and_sufficiency():
    ids, labels = truth_sentences(N, seed=4)
    x = MODEL.encode(ids)
    maps = MODEL.truth(x, labels).float()
    scores = [
        comprehensiveness_sufficiency(
            MODEL.module,
            x,
            maps,
            labels,
            baseline=MODEL.encode(MODEL.encoding.masked(ids, token)),
            feature_mask=MODEL.feature_mask(ids),
        )
        for token in ("mask", "pad")
    ]
    for part in ("comprehensiveness", "sufficiency"):
        a, b = getattr(scores[0], part).curve, getattr(scores[1], part).curve
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------- controls and metrics on (B, T) maps


def test_truth_controls_on_token_maps():
    ids, labels = truth_sentences(8, seed=5)
    x = MODEL.encode(ids)
    truth = MODEL.truth(x, labels).float()
    maps = {n: get_method(n).attribute(MODEL, x, labels) for n in ("truth", "truth_shifted", "truth_other_class")}
    assert torch.equal(maps["truth"], truth)
    torch.testing.assert_close(maps["truth_other_class"], MODEL.truth(x, (labels + 1) % 4).float())
    features = token_features(x)
    assert torch.equal(features, MODEL.feature_mask(ids))
    for b in range(len(ids)):
        words = truth[b, features[b]]
        torch.testing.assert_close(maps["truth_shifted"][b, features[b]], words.roll(len(words) // 2))
        assert (maps["truth_shifted"][b, ~features[b]] == 0).all()
    assert torch.equal(get_method("truth_negated").attribute(MODEL, x, labels), -truth)


def test_roll_features_by_hand():
    values = torch.tensor([[9.0, 1, 2, 3, 4, 9, 0], [9.0, 1, 2, 3, 9, 0, 0]])
    features = torch.tensor([[0, 1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    expected = torch.tensor([[9.0, 3, 4, 1, 2, 9, 0], [9.0, 3, 1, 2, 9, 0, 0]])
    assert torch.equal(roll_features(values, features), expected)


def test_masked_correlation_and_mass_score_the_words_only():
    a = torch.tensor([[5.0, 1, 2, 3, -9], [7.0, 3, 2, 1, 0]])
    t = torch.tensor([[0.0, 1, 2, 4, 8], [-1.0, 1, 2, 3, 0]])
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 1, 1, 1, 0]], dtype=torch.bool)
    torch.testing.assert_close(truth_correlation(a, t, mask).values, torch.tensor([1.0, -1.0]))
    for b in range(2):  # the same as scoring the words alone
        torch.testing.assert_close(
            truth_correlation(a, t, mask).values[b], truth_correlation(a[b : b + 1, 1:4], t[b : b + 1, 1:4]).values[0]
        )
    torch.testing.assert_close(truth_mass(a, t, mask).values, torch.tensor([1.0, 1.0]))
    assert truth_mass(a, -t.abs(), mask).undefined.all()
    with pytest.raises(ValueError, match="feature_mask must be a bool tensor"):
        truth_correlation(a, t, mask.float())


def unit_for(method, n=24):
    ids, labels = truth_sentences(n)
    return Unit(
        model=MODEL,
        method=method,
        images=ids,
        labels=labels,
        sample_ids=torch.arange(n),
        batch_size=8,
        device=torch.device("cpu"),
    )


def test_the_metrics_score_the_truth_at_one_and_its_corruptions_lower():
    assert CORRELATION.availability("text") is None and METRICS.get("truth_mass").availability("text") is None
    cfg = TruthConfig()
    scores = {}
    for name in ("truth", "truth_shifted", "truth_negated", "integrated_gradients", "gradient"):
        result = CORRELATION.evaluate(unit_for(get_method(name)), cfg)
        assert result.params == {"resolution": "token"} and result.sample_ids.tolist() == list(range(24))
        scores[name] = float(result.values.nanmean())
    assert scores["truth"] == pytest.approx(1.0) and scores["integrated_gradients"] > 0.99
    assert scores["truth_negated"] == pytest.approx(-1.0)
    assert scores["truth_shifted"] < 0.5 and scores["gradient"] < 0.5
    mass = MASS.evaluate(unit_for(get_method("truth")), cfg)
    torch.testing.assert_close(mass.values, torch.ones(24))


# ----------------------------------------------------------------------------- registry, adapter and data set


@pytest.mark.parametrize("name", ["truth_tokens", "truth_tokens_nosup"])
def test_registered_adapters_carry_their_truth(name):
    spec = MODELS.get(name)
    assert (spec.family, spec.source, spec.modality, spec.dataset) == ("standard", "hand-set", "text", "truth-text")
    assert spec.tokenizer == "wordpiece-uncased"
    model = load_model(name)
    assert (
        isinstance(model.truth, TokenTruth) and model.truth.cells is None and isinstance(model.encoding, TableEncoding)
    )
    assert model.num_classes == 4 and model.input_size == (MAX_TOKENS + 2,) and model.modality == "text"
    ids, labels = truth_sentences(4)
    x = model.encode(ids)
    assert x.shape == (4, model.encoding.channels, ids.shape[1]) and (x[0][:, ids[0] == VOCAB.pad] == 0).all()
    assert torch.equal(model.feature_mask(ids), ~VOCAB.special(ids))
    torch.testing.assert_close(model.truth(x, labels), token_truth(model, x, labels))
    with pytest.raises(ValueError, match="expects token ids"):
        model.encode(x)


def test_the_data_is_deterministic_padded_balanced_and_made_of_the_lexicon():
    ids, labels = truth_sentences(200, seed=7)
    again, labels_again = truth_sentences(200, seed=7)
    assert torch.equal(ids, again) and torch.equal(labels, labels_again)
    assert not torch.equal(ids, truth_sentences(200, seed=8)[0])
    assert torch.bincount(labels).tolist() == [50] * 4
    assert (ids[:, 0] == VOCAB.cls).all() and ids.shape[1] <= MAX_TOKENS + 2
    length = (ids != VOCAB.pad).sum(1)
    assert (ids[torch.arange(200), length - 1] == VOCAB.sep).all()
    pad = torch.arange(ids.shape[1]) >= length[:, None]
    assert (ids[pad] == VOCAB.pad).all() and (ids[~pad] != VOCAB.pad).all()
    words = set(ids[~pad & MODEL.feature_mask(ids)].tolist())
    assert words <= set(IDS.values())
    fillers = {IDS[w] for w in FILLERS} | {IDS[w] for ws in NEAR_MISS for w, _ in ws}
    evidence = {IDS[w] for ws in (*KEYWORDS, *LINEAR_WORDS) for w, _ in ws}
    for b in range(200):
        present = ids[b].tolist()
        assert set(present) & evidence and sum(i in fillers for i in present) >= 2
    text = load_tokenizer().decode(ids[0].tolist(), skip_special_tokens=True)
    assert all(w in IDS for w in text.split())
    with pytest.raises(ValueError, match="n must be a positive integer"):
        truth_sentences(0)


def test_the_model_classifies_its_data_and_needs_the_suppressor():
    data = DATASETS.get("truth-text").load(None, "wordpiece-uncased")
    assert data.name == "truth-text-1000-seed0" and len(data.labels) == 1000
    ids, labels = truth_sentences(1000, 0)
    assert torch.equal(data.images, ids) and torch.equal(data.labels, labels)
    accuracy = [float((m(m.encode(ids)).argmax(1) == labels).double().mean()) for m in (MODEL, NOSUP)]
    assert accuracy[0] == 1.0 and 0.9 < accuracy[1] < 1.0  # 95.1 %: the uncancelled noise word pulls to "world"
    assert DATASETS.get("truth-text").modality == "text"


def test_the_lexicon_has_one_token_per_word_and_no_word_twice():
    words = [w.word for w in lexicon()]
    assert len(words) == len(set(words))
    assert all(load_tokenizer().encode(w, add_special_tokens=False).ids == [IDS[w]] for w in words)
