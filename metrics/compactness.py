"""Spatial compactness of an explanation: MST-C (Mesgari et al. 2026; Quantus' ``MSTC``, main branch, PR #377).

For an (H, W) map ``a``, the salient points ``V`` are the pixels whose |a| reaches the ``percentile``-th percentile
of the map's |a| (numpy's default ``linear`` interpolation, as ``np.percentile``), as (row, column) coordinates::

    t = percentile(|a|, p)          V = {(r, c) : |a[r, c]| >= t}        n = |V|
    q_spread   = 1 / sqrt(A_hull)    A_hull: the area of the convex hull of V
                                     (V collinear: sqrt(A_hull) is replaced by the image diagonal sqrt(H^2 + W^2))
    q_cohesion = n / L_T             L_T: the total Euclidean length of a minimum spanning tree of V's symmetric
                                     k-nearest-neighbour graph (an edge where either end is among the other's k
                                     nearest; a forest where that graph is disconnected)
    mst_compactness = q_spread * q_cohesion * 100 * sqrt(H^2 + W^2)      (``scale_score``; without: the product)

Higher is more compact: few, tightly packed salient pixels in a small region. It depends on |a| only through which
pixels reach the percentile, so it is invariant to the sign and to positive rescaling; it is invariant to moving the
map's content inside the image. A map whose |a| is 0 everywhere, or that keeps fewer than two points, is undefined:
NaN, flagged. With ``auto_increase_k`` the graph uses the smallest k' >= k (at most n - 1) that connects it, as
Quantus' ``auto_increase_k`` (which tries k, k + 1, ... in turn).

The k nearest neighbours are those of smallest squared distance, ties by the lower row-major index: distances on the
pixel grid tie often (the 8 points at distance sqrt(5)), so they are computed exactly, as integer squared distances
(not ``torch.cdist``, whose matrix-product route rounds), which makes the tie rule exact and k's graph a subgraph of
k + 1's. Quantus takes scikit-learn's neighbours, whose choice among tied ones is its tree's; the two agree wherever
the ties do not change the tree (tests).

Batched where the maps share a shape: |a|, the percentile (one sort of the batch) and the kept pixels. The graph
part is per map, because each map keeps its own number of points. A map's k nearest neighbours are found on the
maps' device, every point at once: each looks through the pixels of a disc around it, nearest first (every pair is
compared where a disc holds more pixels than there are points), ``ROW_BLOCK`` entries at a time. The minimum spanning
tree (Kruskal, an inherently sequential graph algorithm) and the convex hull run per map on the CPU, with scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
from scipy.spatial import ConvexHull
from torch import Tensor

from faithbench.config import to_dict
from faithbench.metrics._checks import check_finite, check_positive_int, check_tensor
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import Scores

ROW_BLOCK = 1 << 22  # (point, candidate) entries per block of a map's k-NN search (int64: 32 MiB a tensor)


@dataclass(frozen=True)
class CompactnessScores(Scores):
    """MST-C per map and its terms, (B,) each: ``spread`` (1 / sqrt(A_hull)), ``cohesion`` (n / L_T), ``points``
    (n; 0 for a map without mass), ``components`` (of the k-NN graph: 1 where the tree spans every point) and ``k``
    (the neighbours used: k, or the k' ``auto_increase_k`` found). NaN / 0 where the map is undefined."""

    spread: Tensor
    cohesion: Tensor
    points: Tensor
    components: Tensor
    k: Tensor


def percentile_cutoff(values: Tensor, percentile: float) -> Tensor:
    """(B,) the ``percentile``-th percentile of each row of (B, N) ``values``, as ``np.percentile``'s default
    (``linear``): position (N - 1) * p / 100 in the sorted row, interpolated between its neighbours.

    >>> import torch
    >>> from faithbench.metrics.compactness import percentile_cutoff
    >>> percentile_cutoff(torch.tensor([[4.0, 1.0, 3.0, 2.0, 0.0]], dtype=torch.float64), 80.0)  # 4 * 0.8 = 3.2
    tensor([3.2000], dtype=torch.float64)
    """
    n = values.shape[1]
    position = (n - 1) * (percentile / 100)  # numpy's virtual index, in the same float64 arithmetic
    low = math.floor(position)
    high = min(low + 1, n - 1)
    ordered = values.sort(dim=1).values
    weight = torch.full_like(ordered[:, 0], position - low)
    return torch.lerp(ordered[:, low], ordered[:, high], weight)  # a + w (b - a), or b - (1 - w) (b - a) for w >= 0.5


def _offsets(radius: int, device: torch.device) -> Tensor:
    """(m, 2) the non-zero offsets (dr, dc) with dr^2 + dc^2 <= radius^2 in (dr^2 + dc^2, dr, dc) order: a pixel's
    neighbours nearest first, ties in row-major order."""
    side = 2 * radius + 1
    r = torch.arange(-radius, radius + 1, device=device)
    dr, dc = (g.flatten() for g in torch.meshgrid(r, r, indexing="ij"))
    d2 = dr * dr + dc * dc
    inside = (d2 > 0) & (d2 <= radius * radius)
    order = ((d2 * side + dr + radius) * side + dc + radius)[inside].argsort()
    return torch.stack([dr, dc], dim=1)[inside][order]


def _brute_force(p: Tensor, rows: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(r, k) neighbours and squared distances of ``p[rows]`` among all of ``p``, by comparing every pair."""
    n = len(p)
    index = torch.arange(n, device=p.device)
    out = []
    for block in rows.split(max(1, ROW_BLOCK // n)):
        d2 = (p[block, None, 0] - p[None, :, 0]) ** 2 + (p[block, None, 1] - p[None, :, 1]) ** 2
        # one key per pair, squared distance first, row-major index second: exact, ties broken by index; a point's
        # own key (d2 = 0) is its index < n, below every other point's (d2 >= 1: the points are distinct)
        out.append((d2 * n + index).topk(k + 1, dim=1, largest=False, sorted=True).values[:, 1:])
    key = torch.cat(out)
    return key % n, key // n


def _window(p: Tensor, mask: Tensor, rows: Tensor, k: int, offsets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(r,) whether each of ``p[rows]`` has ``k`` points among its ``offsets`` (then they are its k nearest: the
    offsets hold every pixel within their radius, in order), (r, k) their indices and squared distances. ``mask``:
    the points' (h, w) pixels."""
    radius = int(offsets.abs().max())
    width = mask.shape[1] + 2 * radius
    grid = torch.full((mask.shape[0] + 2 * radius, width), -1, dtype=torch.long, device=p.device)
    grid[radius:-radius, radius:-radius][mask] = torch.arange(len(p), device=p.device)  # row-major, as p
    grid = grid.flatten()  # a border of the radius: every offset of every point lands inside
    at = (p[:, 0] + radius) * width + p[:, 1] + radius
    step = offsets[:, 0] * width + offsets[:, 1]
    length = (offsets * offsets).sum(dim=1)
    position = torch.arange(len(offsets), device=p.device)
    complete, found, squared = [], [], []
    for block in rows.split(max(1, ROW_BLOCK // len(offsets))):
        j = grid[at[block, None] + step[None]]  # (b, m) the point at each offset, -1 for none
        first = torch.where(j >= 0, position, len(offsets)).topk(k, dim=1, largest=False, sorted=True).values
        complete.append((j >= 0).sum(dim=1) >= k)
        first = first.clamp(max=len(offsets) - 1)  # rows without k points: discarded
        found.append(j.gather(1, first))
        squared.append(length[first])
    return torch.cat(complete), torch.cat(found), torch.cat(squared)


def nearest_neighbours(points: Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, k) indices and integer squared distances of each of the (n, 2) distinct integer ``points``' (in row-major
    order, as ``nonzero`` gives them) ``k`` nearest other points (1 <= k <= n - 1), nearest first, ties in row-major
    order; computed on ``points``' device, returned on the host.

    Each point looks through the pixels of a disc around it, nearest first (a radius that holds about 2k points at
    the points' mean density; doubled for those with fewer than k in it); the points still without k once a disc
    holds more pixels than there are points compare themselves with every point.

    >>> import torch
    >>> from faithbench.metrics.compactness import nearest_neighbours
    >>> idx, d2 = nearest_neighbours(torch.tensor([[0, 0], [0, 1], [0, 2], [5, 5]]), 2)
    >>> idx.tolist(), d2.tolist()  # the middle point's two neighbours tie at 1: both are taken
    ([[1, 2], [0, 2], [1, 0], [2, 1]], [[1, 4], [1, 1], [1, 4], [34, 41]])
    """
    n = len(points)
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must be between 1 and n - 1 = {n - 1}, got {k}")
    p = points.long()
    p = p - p.amin(dim=0)
    height, width = (int(s) + 1 for s in p.amax(dim=0))
    flat = p[:, 0] * width + p[:, 1]
    if not bool((flat[1:] > flat[:-1]).all()):
        raise ValueError("points must be distinct and in row-major order (as torch.nonzero gives them)")
    mask = torch.zeros(height * width, dtype=torch.bool, device=p.device)
    mask[flat] = True
    mask = mask.view(height, width)
    found = torch.zeros((n, k), dtype=torch.long, device=p.device)
    squared = torch.zeros_like(found)
    todo = torch.arange(n, device=p.device)
    radius = max(1, math.ceil(math.sqrt(2 * k * height * width / (math.pi * n))))
    while len(todo):
        offsets = _offsets(radius, p.device)
        if len(offsets) >= n:  # a disc of more pixels than points: comparing with every point is cheaper
            found[todo], squared[todo] = _brute_force(p, todo, k)
            break
        complete, near, d2 = _window(p, mask, todo, k, offsets)
        found[todo[complete]], squared[todo[complete]] = near[complete], d2[complete]
        todo, radius = todo[~complete], 2 * radius
    return found.cpu().numpy(), squared.cpu().numpy()


def knn_graph(neighbours: np.ndarray, squared: np.ndarray, k: int) -> csr_matrix:
    """The symmetric k-NN graph of the first ``k`` columns of :func:`nearest_neighbours`: an edge, weighted by its
    Euclidean length, wherever either end is among the other's ``k`` nearest."""
    n = len(neighbours)
    rows = np.repeat(np.arange(n), k)
    graph = csr_matrix((np.sqrt(squared[:, :k].ravel()), (rows, neighbours[:, :k].ravel())), shape=(n, n))
    return graph.maximum(graph.T).tocsr()


def _components(graph: csr_matrix) -> int:
    return int(connected_components(graph, directed=False, return_labels=False))


def _connecting_k(points: Tensor, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The neighbour lists and the smallest k' >= ``k`` whose graph is connected (n - 1 at most: then complete).
    k's graph is a subgraph of k + 1's (one tie rule for every k), so connectivity only grows with k: doubling
    finds a connected k', bisection the smallest."""
    n = len(points)
    low, high = k, k  # low: its graph is disconnected (unless high == k)
    neighbours, squared = nearest_neighbours(points, high)
    while _components(knn_graph(neighbours, squared, high)) > 1 and high < n - 1:
        low, high = high, min(2 * high, n - 1)
        neighbours, squared = nearest_neighbours(points, high)
    while high - low > 1:
        middle = (low + high) // 2
        if _components(knn_graph(neighbours, squared, middle)) > 1:
            low = middle
        else:
            high = middle
    return neighbours, squared, high


def _sqrt_hull_area(points: np.ndarray, diagonal: float) -> float:
    """sqrt of the area of the (n, 2) integer ``points``' convex hull; ``diagonal`` where they are collinear (no
    two-dimensional hull). Collinearity and the area (half an integer: the shoelace sum of the hull's integer
    vertices) are exact."""
    if len(points) < 3:
        return diagonal
    rel = points - points[0]
    if not np.any(rel[1, 0] * rel[:, 1] - rel[1, 1] * rel[:, 0]):  # every point on the line through the first two
        return diagonal
    corners = points[ConvexHull(points.astype(np.float64)).vertices]  # in order around the hull
    x, y = corners[:, 0], corners[:, 1]
    twice_area = abs(int(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y)))
    return math.sqrt(twice_area / 2)


def check_parameters(percentile: float, k: int, auto_increase_k: bool, scale_score: bool) -> None:
    """Refuse parameters outside their ranges (Quantus' own): 0 <= percentile < 100, k >= 1, two booleans."""
    if isinstance(percentile, bool) or not isinstance(percentile, int | float) or not 0 <= percentile < 100:
        raise ValueError(f"percentile must be a number with 0 <= percentile < 100, got {percentile!r}")
    check_positive_int(k, "k")
    for name, flag in (("auto_increase_k", auto_increase_k), ("scale_score", scale_score)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be true or false, got {flag!r}")


def mst_compactness(
    attributions: Tensor,
    *,
    percentile: float = 80.0,
    k: int = 20,
    auto_increase_k: bool = False,
    scale_score: bool = True,
) -> CompactnessScores:
    """MST-C of each (H, W) map of ``attributions`` (B, H, W) (formula in the module docstring), float64 on the maps'
    device, with its spread and cohesion terms: the pixels whose |a| reaches the ``percentile``-th percentile, the
    inverse square root of their convex hull's area times their number over the length of the minimum spanning tree
    of their ``k``-nearest-neighbour graph (the smallest connecting k' >= k with ``auto_increase_k``), times 100 and
    the image diagonal with ``scale_score``. Higher is more compact. A map without mass, or keeping fewer than two
    pixels, is undefined: NaN, flagged.

    Example:
        >>> import torch
        >>> from faithbench.metrics.compactness import mst_compactness
        >>> maps = torch.zeros(2, 5, 5)
        >>> maps[0, 2, :] = 1.0  # a row of 5: collinear, spread 1 / diagonal, MST 4 -> 100 * 5 / 4
        >>> maps[1, 1:4, 1:4] = -2.0  # a 3 x 3 block: hull 2 x 2, MST 8 -> 100 * sqrt(50) * (1 / 2) * (9 / 8)
        >>> out = mst_compactness(maps)
        >>> out.values.tolist() == [125.0, 100 * 50**0.5 * 9 / 16], out.spread[1].item(), out.cohesion.tolist()
        (True, 0.5, [1.25, 1.125])
    """
    check_tensor(attributions, "attributions", min_dim=3, floating=True)
    if attributions.dim() != 3:
        raise ValueError(f"attributions must be (B, H, W) maps, channels summed; got shape {tuple(attributions.shape)}")
    check_finite(attributions, "attributions")
    check_parameters(percentile, k, auto_increase_k, scale_score)
    b, h, w = attributions.shape
    a = attributions.abs().double()
    flat = a.reshape(b, -1)
    cutoff = percentile_cutoff(flat, float(percentile))
    kept = a >= cutoff.view(b, 1, 1)
    count = kept.reshape(b, -1).sum(dim=1)
    empty = flat.amax(dim=1) == 0  # no mass: every pixel reaches the percentile 0
    undefined = empty | (count < 2)
    diagonal = math.hypot(h, w)
    nan = [math.nan] * b
    spread, cohesion, components, used = list(nan), list(nan), [0] * b, [0] * b
    for i in (~undefined).nonzero().flatten().tolist():
        points = kept[i].nonzero()  # (n, 2) rows and columns, row-major as np.argwhere
        n = len(points)
        if auto_increase_k:
            neighbours, squared, used[i] = _connecting_k(points, min(k, n - 1))
        else:
            used[i] = min(k, n - 1)
            neighbours, squared = nearest_neighbours(points, used[i])
        graph = knn_graph(neighbours, squared, used[i])
        components[i] = _components(graph)
        cohesion[i] = n / float(minimum_spanning_tree(graph).sum())
        spread[i] = 1 / _sqrt_hull_area(points.cpu().numpy(), diagonal)
    kw = {"dtype": torch.float64, "device": attributions.device}
    spread_t, cohesion_t = torch.tensor(spread, **kw), torch.tensor(cohesion, **kw)
    values = spread_t * cohesion_t * (100 * diagonal if scale_score else 1.0)
    whole = {"dtype": torch.long, "device": attributions.device}
    return CompactnessScores(values=values, undefined=undefined, spread=spread_t, cohesion=cohesion_t,
                             points=count.where(~empty, 0), components=torch.tensor(components, **whole),
                             k=torch.tensor(used, **whole))  # fmt: skip


# --------------------------------------------------------------------------- the suite's metric


@dataclass(frozen=True)
class CompactnessConfig:
    """``[compactness]``: the salient pixels are those whose |a| reaches the ``percentile``-th percentile (Quantus'
    ``threshold``, 80); the graph joins each to its ``k`` nearest (20), or to the smallest connecting k' >= k with
    ``auto_increase_k`` (off); ``scale_score`` multiplies by 100 and the image diagonal (on); the suite's first
    ``max_samples`` samples (0: all). Quantus main's defaults throughout."""

    percentile: float = 80.0
    k: int = 20
    auto_increase_k: bool = False
    scale_score: bool = True
    max_samples: int = 0

    def __post_init__(self) -> None:
        check_parameters(self.percentile, self.k, self.auto_increase_k, self.scale_score)
        if isinstance(self.max_samples, bool) or not isinstance(self.max_samples, int) or self.max_samples < 0:
            raise ValueError(f"max_samples must be an integer >= 0 (0: every sample), got {self.max_samples!r}")


def evaluate(unit: Unit, cfg: CompactnessConfig) -> MetricResult:
    """MST-C of the method's maps of this piece's samples among the suite's first ``max_samples``."""
    _, _, ids = unit.samples()
    first = unit.first_samples(cfg.max_samples)
    ids, params = ids[first], to_dict(cfg)
    if len(ids) == 0:
        return MetricResult.empty(params, "samples")
    maps = unit.sample_maps()[first.to(unit.device)]
    res = mst_compactness(maps, percentile=cfg.percentile, k=cfg.k, auto_increase_k=cfg.auto_increase_k,
                          scale_score=cfg.scale_score)  # fmt: skip
    return MetricResult(values=res.values, undefined=res.undefined, sample_ids=ids, params=params, explained="samples")


def cost(unit: Unit, cfg: CompactnessConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps (the score itself asks no model)."""
    return sample_maps_cost(unit)


MST_COMPACTNESS = described("mst_compactness", evaluate=evaluate, cost=cost, config=CompactnessConfig)
