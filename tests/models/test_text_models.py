"""The pure-torch BERT classifier against a reference output stored here (computed once with transformers 4.57.6's
BertModel on the same MiniLM checkpoint), not against a live download."""

import torch

from faithbench.models.checkpoints.hf_bert import load_tokenizer
from faithbench.models.nets.text_transformer import minilm_classifier

SENTENCE = "A gripping, beautifully acted film about grief."
IDS = [101, 1037, 13940, 1010, 17950, 6051, 2143, 2055, 9940, 1012, 102]
# last_hidden_state[0, [0, 4, 10], :6], its sum, its absolute sum, pooler_output[0, :6]
REFERENCE_HIDDEN = [
    [
        -0.02454288676381111,
        -0.5659661889076233,
        0.09644793719053268,
        -0.035765718668699265,
        0.14491185545921326,
        0.2607885003089905,
    ],
    [
        0.3203093409538269,
        -0.38118961453437805,
        0.35151779651641846,
        -0.2276420295238495,
        -0.2767326831817627,
        0.5376904606819153,
    ],
    [
        -0.09611120820045471,
        -0.3097761869430542,
        -0.10014957189559937,
        0.3578912019729614,
        0.018726715818047523,
        0.6041408181190491,
    ],
]
REFERENCE_SUM, REFERENCE_ABS_SUM = 7.345240592956543, 1379.03515625
REFERENCE_POOLED = [
    -0.046633753925561905,
    -0.02800583280622959,
    0.016729040071368217,
    0.04901838302612305,
    -0.06433751434087753,
    -0.009732375852763653,
]


def test_tokenizer_gives_wordpiece_ids_with_cls_and_sep_and_no_padding():
    encoding = load_tokenizer().encode(SENTENCE)
    assert encoding.ids == IDS and encoding.tokens[0] == "[CLS]" and encoding.tokens[-1] == "[SEP]"
    assert len(load_tokenizer().encode("Dull.").ids) == 4


def test_pure_torch_forward_matches_the_stored_bert_reference():
    model = minilm_classifier(depth=6)
    ids = torch.tensor([IDS])
    with torch.no_grad():
        hidden = model.encode(model.embed(ids), torch.ones_like(ids))
        pooled = model.pooler_act(model.pooler(hidden[:, 0]))
    torch.testing.assert_close(hidden[0, [0, 4, 10], :6], torch.tensor(REFERENCE_HIDDEN), rtol=0, atol=2e-6)
    assert abs(hidden.sum().item() - REFERENCE_SUM) < 1e-3 and abs(hidden.abs().sum().item() - REFERENCE_ABS_SUM) < 1e-2
    torch.testing.assert_close(pooled[0, :6], torch.tensor(REFERENCE_POOLED), rtol=0, atol=2e-6)


def test_padding_is_masked_and_the_classifier_is_seeded():
    model = minilm_classifier(depth=3)
    short = load_tokenizer().encode("Dull.").ids
    ids = torch.tensor([short + [0] * 3])
    mask = torch.tensor([[1] * len(short) + [0] * 3])
    with torch.no_grad():
        padded = model(ids, mask)
        alone = model(torch.tensor([short]))
    torch.testing.assert_close(padded, alone, rtol=0, atol=1e-5)
    assert len(model.blocks) == 3 and padded.shape == (1, 2)
    torch.testing.assert_close(minilm_classifier(depth=3).classifier.weight, model.classifier.weight)


def test_long_texts_are_truncated_to_the_positions_and_longer_inputs_are_refused():
    import pytest

    ids = load_tokenizer().encode("word " * 2000).ids
    assert len(ids) == 512 and ids[0] == 101 and ids[-1] == 102
    model = minilm_classifier(depth=3)
    with pytest.raises(ValueError, match="longer than the model's 512 positions"):
        model(torch.ones(1, 513, dtype=torch.long))
