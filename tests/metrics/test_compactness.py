"""MST-C (metrics/compactness.py): hand-computed maps, invariances and bounds, a plain per-pixel reference (numpy's
percentile, networkx's spanning tree, scipy's hull), Quantus main's neighbour search (scikit-learn) where the choice
among tied neighbours cannot matter, and the suite's rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from faithbench.metrics.compactness import CompactnessConfig, mst_compactness, nearest_neighbours, percentile_cutoff


def _map(shape: tuple[int, int], points: list[tuple[int, int]], value: float = 1.0) -> torch.Tensor:
    a = torch.zeros(1, *shape)
    for r, c in points:
        a[0, r, c] = value
    return a


def test_a_line_and_a_block_by_hand():
    """A row of 5 in a 5 x 5 map (20 %: the 80th percentile lies between its 0s and 1s): collinear, so the spread's
    sqrt(area) is the diagonal sqrt(50), MST 4; a 3 x 3 block: hull 2 x 2, MST 8 unit edges."""
    line = mst_compactness(_map((5, 5), [(2, c) for c in range(5)]))
    assert line.points.item() == 5 and line.components.item() == 1
    assert line.spread.item() == pytest.approx(1 / math.sqrt(50), rel=1e-15)
    assert line.cohesion.item() == 5 / 4 and line.values.item() == pytest.approx(100 * 5 / 4, rel=1e-15)
    block = mst_compactness(_map((6, 6), [(r, c) for r in range(1, 4) for c in range(2, 5)], value=-3.0))
    assert block.points.item() == 9 and block.spread.item() == 0.5 and block.cohesion.item() == 9 / 8
    assert block.values.item() == pytest.approx(100 * math.sqrt(72) * 0.5 * 9 / 8, rel=1e-15)
    unscaled = mst_compactness(_map((6, 6), [(r, c) for r in range(1, 4) for c in range(2, 5)]), scale_score=False)
    assert unscaled.values.item() == 0.5 * 9 / 8


def test_diagonal_steps_and_an_l_shape_by_hand():
    """Points a knight's or a diagonal step apart: the tree's edges have their Euclidean lengths; an L of 5 pixels
    has a triangular hull of area 2."""
    diagonal = mst_compactness(_map((3, 3), [(0, 0), (1, 1), (2, 2)]), percentile=70.0)  # 3 of 9 kept
    assert diagonal.points.item() == 3 and diagonal.cohesion.item() == pytest.approx(3 / (2 * math.sqrt(2)))
    assert diagonal.spread.item() == pytest.approx(1 / math.hypot(3, 3))  # collinear
    ell = mst_compactness(_map((5, 5), [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0)]), percentile=80.0)
    assert ell.points.item() == 5 and ell.spread.item() == pytest.approx(1 / math.sqrt(2))
    assert ell.cohesion.item() == 5 / 4
    knight = mst_compactness(_map((4, 4), [(0, 0), (1, 2), (3, 3)]), percentile=85.0)  # 3 of 16 kept
    # edges sqrt(5) (0,0)-(1,2) and sqrt(5) (1,2)-(3,3); hull triangle |1*3 - 2*3| / 2 = 1.5
    assert knight.points.item() == 3 and knight.cohesion.item() == pytest.approx(3 / (2 * math.sqrt(5)))
    assert knight.spread.item() == pytest.approx(1 / math.sqrt(1.5))


def test_two_far_clusters_make_a_forest_or_the_smallest_k_that_joins_them():
    """Two pixels top left, three bottom right (5 of 100: the 95th percentile). With k = 1 the graph is two trees
    (lengths 1 and 1 + 1: the corner's tie between (9, 8) and (8, 9) goes to the row-major first); the hull
    (0,0), (9,8), (9,9), (8,9), (0,1) has area 26 / 2. auto_increase_k: k = 2 joins them, through the shortest
    bridge (0,1)-(8,9) = sqrt(128)."""
    a = _map((10, 10), [(0, 0), (0, 1), (9, 8), (9, 9), (8, 9)])
    forest = mst_compactness(a, percentile=95.0, k=1)
    assert forest.points.item() == 5 and forest.components.item() == 2 and forest.k.item() == 1
    assert forest.cohesion.item() == 5 / 3 and forest.spread.item() == pytest.approx(1 / math.sqrt(13), rel=1e-15)
    joined = mst_compactness(a, percentile=95.0, k=1, auto_increase_k=True)
    assert joined.components.item() == 1 and joined.k.item() == 2
    assert joined.cohesion.item() == pytest.approx(5 / (3 + math.sqrt(128)), rel=1e-15)
    assert joined.spread.item() == forest.spread.item()


def test_the_percentile_keeps_ties_at_the_cutoff_as_quantus_does():
    """5 ones among 100 pixels: the 80th percentile is 0, and |a| >= 0 keeps every pixel (Quantus' rule), so the
    score is the whole image's: hull 9 x 9, MST 99 unit edges."""
    out = mst_compactness(_map((10, 10), [(0, c) for c in range(5)]))
    assert out.points.item() == 100 and out.spread.item() == 1 / 9 and out.cohesion.item() == 100 / 99


def test_undefined_maps_are_flagged():
    """A map without mass (Quantus scores it 0) and one that keeps a single pixel (a tree of no edges) are NaN."""
    a = torch.zeros(3, 10, 10)
    a[1] = torch.arange(100.0).view(10, 10)  # distinct values: the 99th percentile keeps only the largest
    a[2, 4:6, 4:6] = 1.0
    out = mst_compactness(a, percentile=99.0)
    assert out.undefined.tolist() == [True, True, False] and out.values[:2].isnan().all()
    assert out.points.tolist() == [0, 1, 4] and out.k.tolist() == [0, 0, 3]


def test_the_percentile_is_numpys():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(4, 37, generator=gen, dtype=torch.float64)
    values[3, :30] = 0.5  # ties
    for p in (0.0, 12.5, 50.0, 80.0, 99.9):
        want = np.percentile(values.numpy(), p, axis=1)
        assert np.array_equal(percentile_cutoff(values, p).numpy(), want), p


def test_bad_arguments_are_refused():
    a = torch.rand(2, 8, 8)
    with pytest.raises(ValueError, match="0 <= percentile < 100"):
        mst_compactness(a, percentile=100.0)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        mst_compactness(a, k=0)
    with pytest.raises(ValueError, match=r"\(B, H, W\) maps"):
        mst_compactness(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match="NaN/inf"):
        mst_compactness(torch.full((1, 4, 4), float("nan")))
    with pytest.raises(ValueError, match="auto_increase_k must be true or false"):
        CompactnessConfig(auto_increase_k=1)
    with pytest.raises(ValueError, match="max_samples must be an integer >= 0"):
        CompactnessConfig(max_samples=-1)
    with pytest.raises(ValueError, match="row-major order"):
        nearest_neighbours(torch.tensor([[1, 0], [0, 0], [2, 2]]), 1)


def _random_maps(seed: int, shape: tuple[int, int], kind: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if kind == "noise":
        return torch.randn(3, *shape, generator=gen)
    if kind == "smooth":
        coarse = torch.randn(3, 1, shape[0] // 4 + 1, shape[1] // 4 + 1, generator=gen)
        return torch.nn.functional.interpolate(coarse, size=shape, mode="bilinear", align_corners=False)[:, 0]
    sparse = torch.rand(3, *shape, generator=gen)  # a quarter of the pixels non-zero, the rest 0
    return sparse * (torch.rand(3, *shape, generator=gen) < 0.25)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), exponent=st.integers(-30, 30), kind=st.sampled_from(["noise", "smooth", "sparse"]))
def test_invariant_to_the_sign_and_to_positive_rescaling(seed, exponent, kind):
    """Only which pixels reach the percentile matters: a power of two (exact in floating point) and any signs leave
    the score unchanged, to the bit."""
    a = _random_maps(seed, (12, 10), kind)
    signs = torch.where(_random_maps(seed + 1, (12, 10), "noise") > 0, 1.0, -1.0)
    base, moved = mst_compactness(a), mst_compactness(a * signs * 2.0**exponent)
    assert torch.equal(base.values.nan_to_num(-1), moved.values.nan_to_num(-1))
    assert torch.equal(base.points, moved.points)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), size=st.tuples(st.integers(6, 8), st.integers(6, 8)),
       at=st.tuples(st.integers(0, 8), st.integers(0, 8)), k=st.integers(1, 25))  # fmt: skip
def test_invariant_to_moving_the_content_inside_the_image(seed, size, at, k):
    """A blob of random |a| > 0 (25 to 44 % of a 12 x 12 map, so the kept pixels are the blob's largest) scores the
    same in the corner and anywhere else inside the image."""
    gen = torch.Generator().manual_seed(seed)
    blob = torch.rand(*size, generator=gen) + 0.1
    r, c = min(at[0], 12 - size[0]), min(at[1], 12 - size[1])
    corner, moved = torch.zeros(1, 12, 12), torch.zeros(1, 12, 12)
    corner[0, : size[0], : size[1]] = blob
    moved[0, r : r + size[0], c : c + size[1]] = blob
    one, two = mst_compactness(corner, k=k), mst_compactness(moved, k=k)
    assert one.values.item() == two.values.item() and one.points.item() == two.points.item()
    assert one.points.item() < size[0] * size[1]  # the blob's largest, not the background


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), kind=st.sampled_from(["noise", "smooth", "sparse"]), k=st.integers(1, 25),
       percentile=st.floats(0.0, 95.0), auto=st.booleans())  # fmt: skip
def test_the_terms_bounds(seed, kind, k, percentile, auto):
    """Distinct pixels are >= 1 apart, so a forest of c trees over n points is >= n - c long: cohesion is in
    (0, n / (n - c)]; a two-dimensional hull of pixels has area >= 1/2 and < the diagonal squared: the spread is in
    [1 / diagonal, sqrt(2)]; the score is their product times 100 and the diagonal."""
    a = _random_maps(seed, (14, 11), kind)
    out = mst_compactness(a, k=k, percentile=percentile, auto_increase_k=auto)
    diagonal = math.hypot(14, 11)
    ok = ~out.undefined
    n, c = out.points[ok].double(), out.components[ok].double()
    assert (out.cohesion[ok] > 0).all() and (out.cohesion[ok] <= n / (n - c) + 1e-12).all()
    assert (out.spread[ok] >= 1 / diagonal - 1e-15).all() and (out.spread[ok] <= math.sqrt(2) + 1e-12).all()
    torch.testing.assert_close(out.values[ok], out.spread[ok] * out.cohesion[ok] * 100 * diagonal, rtol=1e-15, atol=0)
    fewest = torch.clamp(out.points[ok] - 1, max=k)  # min(k, n - 1)
    assert (out.k[ok] >= fewest).all() if auto else (out.k[ok] == fewest).all()
    if auto:
        assert (out.components[ok] == 1).all()


def _reference(a: np.ndarray, percentile: float, k: int, auto: bool) -> float:
    """Quantus main's definition, written out plainly: numpy's percentile, the kept pixels row by row, each one's
    others sorted by (squared distance, index), networkx's minimum spanning forest, scipy's hull."""
    import networkx as nx
    from scipy.spatial import ConvexHull

    a = np.abs(a.astype(np.float64))
    h, w = a.shape
    diagonal = math.hypot(h, w)
    if a.max() == 0:
        return math.nan
    cutoff = np.percentile(a, percentile)
    points = [(r, c) for r in range(h) for c in range(w) if a[r, c] >= cutoff]
    n = len(points)
    if n < 2:
        return math.nan
    coords = np.array(points, dtype=np.float64)
    side = diagonal
    if n >= 3 and np.linalg.matrix_rank(coords - coords[0]) >= 2:
        side = math.sqrt(ConvexHull(coords).volume)

    def d2(i: int, j: int) -> int:
        return (points[i][0] - points[j][0]) ** 2 + (points[i][1] - points[j][1]) ** 2

    order = [sorted((j for j in range(n) if j != i), key=lambda j, i=i: (d2(i, j), j)) for i in range(n)]

    def graph(kk: int):
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_weighted_edges_from((i, j, math.sqrt(d2(i, j))) for i in range(n) for j in order[i][:kk])
        return g

    kk = min(k, n - 1)
    g = graph(kk)
    while auto and not nx.is_connected(g) and kk < n - 1:
        kk += 1
        g = graph(kk)
    length = sum(d["weight"] for _, _, d in nx.minimum_spanning_edges(g, data=True))
    return (1 / side) * (n / length) * 100 * diagonal


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), kind=st.sampled_from(["noise", "smooth", "sparse"]),
       shape=st.sampled_from([(9, 9), (12, 7), (6, 14)]), k=st.integers(1, 22),
       percentile=st.sampled_from([50.0, 70.0, 80.0, 90.0]), auto=st.booleans())  # fmt: skip
def test_the_same_as_a_plain_reference(seed, kind, shape, k, percentile, auto):
    a = _random_maps(seed, shape, kind)
    ours = mst_compactness(a, percentile=percentile, k=k, auto_increase_k=auto).values.numpy()
    theirs = [_reference(m, percentile, k, auto) for m in a.numpy()]
    assert np.allclose(ours, theirs, rtol=1e-12, atol=0, equal_nan=True), (ours, theirs)


def test_the_neighbour_search_is_every_pair_compared():
    """The disc search (nearest first, doubled where short) gives the lists of comparing every pair, on points dense
    in one corner and sparse elsewhere (both searches, and the fall-back to every pair)."""
    gen = torch.Generator().manual_seed(3)
    dense = torch.rand(40, 40, generator=gen) < 0.6
    dense[10:, :] &= torch.rand(30, 40, generator=gen) < 0.02
    points = dense.nonzero()
    n = len(points)
    for k in (1, 5, 20, n - 1):
        idx, d2 = nearest_neighbours(points, k)
        p = points.numpy()
        full = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
        for i in range(n):
            order = sorted((j for j in range(n) if j != i), key=lambda j, i=i: (full[i, j], j))[:k]
            assert idx[i].tolist() == order and d2[i].tolist() == full[i, order].tolist()


def test_quantus_mains_neighbour_search_where_the_tie_choice_cannot_matter():
    """Quantus main takes scikit-learn's k nearest (``kneighbors_graph``, symmetrised by the larger weight), whose
    choice among neighbours tied at the k-th distance is its tree's. Every choice lies between the graph of the
    strictly nearer neighbours and the graph with every tied one; where those two have the same components and
    spanning-forest length, every choice gives this length, and there Quantus' pipeline gives our score."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
    from scipy.spatial import ConvexHull
    from sklearn.neighbors import kneighbors_graph

    def forest(p: np.ndarray, keep: np.ndarray) -> tuple[int, float]:
        dist = np.sqrt(((p[:, None, :] - p[None, :, :]) ** 2).sum(-1))
        g = csr_matrix(np.where(keep | keep.T, dist, 0.0))
        return connected_components(g, directed=False)[0], float(minimum_spanning_tree(g).sum())

    compared, seen = 0, 0
    for seed in range(12):
        for kind in ("noise", "smooth", "sparse"):
            maps = _random_maps(seed, (28, 28), kind)
            ours = mst_compactness(maps).values.numpy()
            for m, score in zip(maps.numpy(), ours, strict=True):
                a = np.abs(m.astype(np.float64))
                p = np.argwhere(a >= np.percentile(a, 80.0)).astype(np.float64)
                k = min(20, len(p) - 1)
                d2 = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
                np.fill_diagonal(d2, np.inf)
                kth = np.sort(d2, axis=1)[:, k - 1 : k]
                seen += 1
                if forest(p, d2 < kth) != forest(p, d2 <= kth):
                    continue
                g = kneighbors_graph(p, n_neighbors=k, mode="distance", include_self=False)
                length = float(minimum_spanning_tree(g.maximum(g.T)).sum())
                side = math.sqrt(ConvexHull(p).volume)
                theirs = (1 / side) * (len(p) / length) * 100 * math.hypot(28, 28)
                assert score == pytest.approx(theirs, rel=1e-12)
                compared += 1
    assert compared >= 3 * seen // 4, (compared, seen)


SUITE = {
    "name": "compact", "dataset": "mnist", "models": ["cnn_mnist"], "methods": ["gradient", "gradcam"],
    "metrics": ["mst_compactness"], "n_samples": 6, "batch_size": 4, "controls": False,
    "compactness": {"k": 10, "max_samples": 5},
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from faithbench.bench.run.runner import run
    from faithbench.bench.run.suite import build_suite

    root = tmp_path_factory.mktemp("compact")
    for name, extra in (("one", {}), ("two", {"pieces": 2})):
        run(build_suite({**SUITE, **extra}, "test"), root / name, device="cpu", progress=False)
    return root


def test_a_suite_scores_the_maps_as_the_function_does(runs):
    """The run's rows are the function's on the method's maps of the suite's first 5 samples, with k = 10 from the
    suite's table; two pieces give the same rows."""
    import pandas as pd

    from faithbench.attributions import get_method
    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    key = ["method", "sample_id"]
    one, two = (pd.read_csv(runs / n / "samples.csv").sort_values(key).reset_index(drop=True) for n in ("one", "two"))
    assert len(one) == 2 * 5 and one[key].equals(two[key])
    assert np.allclose(one["value"], two["value"], rtol=1e-12, equal_nan=True)
    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model("cnn_mnist")
    ids = sample_ids(suite, len(data.labels))[:5]
    x, labels = model.encode(data.images[ids]), data.labels[ids]
    got = one.set_index(key)["value"]
    for method in ("gradient", "gradcam"):
        maps = get_method(method).attribute(model, x, labels)
        want = mst_compactness(maps, k=10).values.numpy()
        assert np.allclose(got[method].loc[ids.tolist()].to_numpy(), want, rtol=1e-9, equal_nan=True), method
    rows = pd.read_csv(runs / "one" / "results.csv")
    assert set(rows.metric) == {"mst_compactness"} and rows["params"].str.contains('"k": 10').all()


def test_the_estimate_counts_what_the_run_explains(runs):
    import pandas as pd

    from faithbench.bench.estimate.counts import estimate
    from faithbench.bench.run.plan import resolve
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    rows = pd.read_csv(runs / "one" / "results.csv").drop_duplicates(["model", "method", "metric"])
    measured = rows.set_index("method")[["model_inputs", "model_calls"]]
    cost = estimate(resolve(build_suite(SUITE, "test")), {"cnn_mnist": load_model("cnn_mnist")}, 10)
    planned = cost.units.set_index("method")
    for method in ("gradient", "gradcam"):
        assert measured.loc[method, "model_inputs"] == planned.loc[method, "model inputs"], method
        assert measured.loc[method, "model_calls"] == planned.loc[method, "model calls"], method
