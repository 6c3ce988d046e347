"""Batched LIME and Shapley value sampling equal Captum's per-sample results for the same seed."""

import captum.attr as ca
import torch
from captum._utils.models.linear_model import SkLearnRidge
from captum.attr._core.lime import get_exp_kernel_similarity_function
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from faithbench.attributions.sampling import lime_weights, segment_maps, shapley_sampling_values, top_k_mask


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5)).eval()


def problem(seed: int = 0, n: int = 4):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, 8, 8, generator=gen)
    # Different segment counts per sample (3 .. 16 patches): the batch must not couple the samples.
    rows, cols = torch.arange(8).view(8, 1), torch.arange(8).view(1, 8)
    segments = torch.stack([(rows // (8 // g)) * g + cols // (8 // g) for g in (2, 4, 2, 4)][:n])
    segments[0] = segments[0].clamp(max=2)
    targets = torch.tensor([0, 3, 1, 4])[:n]
    return x, segments, targets


def score_fn(model: nn.Module):
    return lambda inputs: model(inputs).softmax(-1)


def test_lime_equals_captum_per_sample():
    model = tiny_model()
    x, segments, targets = problem()
    ours = lime_weights(score_fn(model), x, segments, targets, n_samples=60, kernel_width=0.25, seed=3, max_batch=7)
    lime = ca.Lime(
        lambda inp: model(inp).softmax(-1),
        interpretable_model=SkLearnRidge(alpha=1.0),
        similarity_func=get_exp_kernel_similarity_function("cosine", 0.25),
    )
    for i in range(len(x)):
        torch.manual_seed(3)
        ref = lime.attribute(
            x[i : i + 1],
            target=targets[i : i + 1],
            feature_mask=segments[i].view(1, 1, 8, 8),
            n_samples=60,
            perturbations_per_eval=16,
            return_input_shape=False,
        )[0]
        k = ref.shape[0]
        torch.testing.assert_close(ours[i, :k], ref, rtol=2e-4, atol=2e-6)
        assert (ours[i, k:] == 0).all()


def test_shapley_sampling_equals_captum_per_sample():
    model = tiny_model()
    x, segments, targets = problem()
    ours = shapley_sampling_values(score_fn(model), x, segments, targets, n_samples=3, seed=5, max_batch=5)
    svs = ca.ShapleyValueSampling(lambda inp: model(inp).softmax(-1))
    for i in range(len(x)):
        torch.manual_seed(5)
        ref = svs.attribute(
            x[i : i + 1], target=targets[i : i + 1], feature_mask=segments[i].view(1, 1, 8, 8), n_samples=3
        )[0, 0]
        torch.testing.assert_close(segment_maps(ours, segments)[i], ref, rtol=1e-5, atol=1e-7)


def test_shapley_values_are_efficient_for_every_permutation():
    """Each permutation's gains telescope: the values sum to score(x) - score(baseline)."""
    model = tiny_model()
    x, segments, targets = problem()
    score = score_fn(model)
    values = shapley_sampling_values(score, x, segments, targets, n_samples=2, baseline=0.3)
    with torch.no_grad():
        total = (score(x) - score(torch.full_like(x, 0.3))).gather(1, targets.view(-1, 1)).squeeze(1)
    torch.testing.assert_close(values.sum(1), total, rtol=1e-5, atol=1e-6)


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 4), max_batch=st.integers(1, 40), seed=st.integers(0, 100))
def test_a_samples_values_do_not_depend_on_its_batch_or_the_call_size(batch, max_batch, seed):
    model = tiny_model()
    x, segments, targets = problem(seed)
    score = score_fn(model)
    for fn, kw in ((lime_weights, {"n_samples": 20}), (shapley_sampling_values, {"n_samples": 2})):
        alone = fn(score, x[:1], segments[:1], targets[:1], seed=seed, **kw)
        batched = fn(score, x[:batch], segments[:batch], targets[:batch], seed=seed, max_batch=max_batch, **kw)
        k = alone.shape[1]
        torch.testing.assert_close(batched[0, :k], alone[0], rtol=1e-4, atol=1e-6)


def test_calls_never_exceed_max_batch_and_identical_inputs_share_them():
    model = tiny_model()
    x, segments, targets = problem()
    sizes = []

    def score(inputs):
        sizes.append(len(inputs))
        return score_fn(model)(inputs)

    shapley_sampling_values(score, x, segments, targets, n_samples=2, max_batch=11)
    # Baselines plus one call per (permutation, step), less the full set that both permutations end with.
    assert max(sizes) == 11 and sum(sizes) <= 4 + 2 * int((segments.flatten(1).amax(1) + 1).sum()) - 4
    sizes.clear()
    lime_weights(score, x, segments, targets, n_samples=30, max_batch=11)
    # Sample 0 has 3 segments: its 30 draws hold at most 2^3 distinct subsets.
    assert max(sizes) == 11 and sum(sizes) <= 8 + 3 * 30
    # One image explained for three targets (a GridPG grid's cells) costs the model calls of one.
    for fn, kw in ((lime_weights, {"n_samples": 30}), (shapley_sampling_values, {"n_samples": 2})):
        sizes.clear()
        alone = [fn(score, x[1:2], segments[1:2], t.view(1), **kw) for t in targets[:3]]
        calls_alone = sum(sizes) / 3
        sizes.clear()
        shared = fn(score, x[1:2].expand(3, -1, -1, -1), segments[1:2].expand(3, -1, -1), targets[:3], **kw)
        assert sum(sizes) == calls_alone
        torch.testing.assert_close(shared, torch.cat(alone), rtol=1e-5, atol=1e-7)


def test_top_k_mask_keeps_only_positive_top_weights():
    weights = torch.tensor([[0.5, -1.0, 0.2, 0.0], [-0.1, -0.2, -0.3, -0.4]])
    assert top_k_mask(weights, 2).tolist() == [[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


def test_sampling_leaves_the_global_random_state_alone_and_float64_inputs_are_compared_exactly():
    model = tiny_model().double()
    x, segments, targets = problem()
    x = x.double()
    x[1] = x[0] + 1e-12  # differs from x[0] only below float32 resolution: must not share evaluations
    segments[1] = segments[0]
    state = torch.get_rng_state()
    calls = []

    def score(inputs):
        calls.append(len(inputs))
        return model(inputs).softmax(-1)

    shapley_sampling_values(score, x[:2], segments[:2], targets[:2], n_samples=1)
    assert torch.equal(torch.get_rng_state(), state)
    assert sum(calls) == 2 * (1 + int(segments[0].max()) + 1)  # no job of sample 1 merged into sample 0's


def test_a_segment_equal_to_the_baseline_gains_exactly_zero_whatever_the_kernels_round():
    """Adding a segment that already equals the baseline gives the same input: its value is exactly 0 (the dummy
    axiom). Evaluated twice, in two rows of a batch, its gain would be whatever the kernels round each row to (here: a
    few ulps by row) and a removal curve would rank it by that sign."""
    x, segments, targets = problem(n=1)
    x[:, :, segments[0] == 1] = 0.0  # segment 1 is the baseline already
    model = tiny_model()

    def rounding(inputs: torch.Tensor) -> torch.Tensor:
        out = torch.softmax(model(inputs), dim=1)
        ulps = torch.arange(len(inputs)).view(-1, 1) % 5 - 2
        return out * (1 + ulps * torch.finfo(torch.float32).eps)

    values = shapley_sampling_values(rounding, x, segments, targets, n_samples=3, max_batch=4)
    assert values[0, 1] == 0 and (values[0, [0, 2]] != 0).all()
    x[:, :, segments[0] == 1] = 0.5
    values = shapley_sampling_values(rounding, x, segments, targets, n_samples=3, max_batch=4)
    assert values[0, 1] != 0  # a segment unlike the baseline has a value
    x[:, 0, segments[0] == 1] = 0.0  # one channel differs from the baseline: not inert
    assert shapley_sampling_values(rounding, x, segments, targets, n_samples=3, max_batch=4)[0, 1] != 0
