"""The report card of the metrics: can each metric tell a faithful explanation from an unfaithful one, does it rank
the methods as the truth does, and does its ranking replicate?

One row per metric, one column per question:

* ``AUROC truth`` (ground-truth tier, ``OUT/truth``): on the hand-set models, the probability that the metric scores
  the exact attribution (``truth``) better than a planted corruption of it (``truth_shifted``,
  ``truth_other_class``, ``truth_negated``) on the same sample, ties counted half -- the AUROC of the metric as a
  classifier of faithful vs unfaithful maps, paired by sample (BonaFide's framing);
* ``AUROC controls`` (this run's trained models): the same probability for every method's map against every
  model-free control's map (``random``, ``uniform``, ``centre``, ``edges``: maps that cannot be faithful, as they
  never ask the model) on the same sample;
* ``AUROC corruptions`` (this run's trained models): the same probability for a method's map against its planted
  corruptions (the corruption controls of :mod:`faithbench.attributions.corruptions`: the map shuffled over the
  features, the map of another class, the map on a randomised copy of the model; each paired with the method it
  corrupts, its parameter ``of``) on the same sample;
* ``tau truth``: Kendall's tau-b between the metric's ranking of the tier's methods (controls left out) and their
  ranking by their agreement with the exact attribution (the tier's reference metric,
  as the run records it: ``RunCatalog.truth_reference``), mean over the hand-set models;
* ``split-half``, ``alpha``, ``rerun rho``, ``agreement tau``: this run's split-half reliability and Krippendorff's
  alpha of the per-sample method ranks (:mod:`.agreement`; each the mean over the models), rerun agreement of the
  seeded methods (mean) and mean Kendall tau with the other metrics (:mod:`.statistics`).

An AUROC is *better than chance* when a one-sided binomial (sign) test of the untied pairs rejects 0.5 at 0.05; a
metric whose AUROCs are not is flagged. 0.5 is a coin flip; 1 always prefers the faithful map.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from faithbench.bench.report.order import metric_order
from faithbench.bench.report.statistics import metric_agreement
from faithbench.bench.report.statistics_section import LeaderboardStats, read_samples
from faithbench.bench.report.style import WIDTH_IN, save
from faithbench.bench.store.results import first_runs, read_results, tier_folder
from faithbench.bench.store.run_catalog import current

MODEL_FREE = ("random", "uniform", "centre", "edges")
COLUMNS = [
    "AUROC truth", "AUROC controls", "AUROC corruptions", "tau truth", "split-half", "alpha", "rerun rho",
    "agreement tau",
]  # fmt: skip


def paired_auroc(samples: pd.DataFrame, direction: dict[str, float], good: list[str], bad: list[str]) -> pd.DataFrame:
    """Per metric: P(a ``good`` map scores better than a ``bad`` map of the same model and sample), ties 1/2,
    over every (good, bad) pair; ``n`` untied pairs, ``p`` the one-sided sign test against 0.5."""
    return paired_auroc_of(samples, direction, [(g, b) for g in good for b in bad])


def paired_auroc_of(samples: pd.DataFrame, direction: dict[str, float], pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """:func:`paired_auroc` over the given (good, bad) method pairs."""
    rows = []
    first = samples[samples["rerun_of"].isna()] if "rerun_of" in samples else samples
    for metric, part in first.groupby("metric", sort=False):
        wide = part.pivot_table(index=["model", "sample_id"], columns="method", values="value", aggfunc="first")
        d = direction.get(metric, 1.0)
        wins = ties = total = 0
        for g, b in pairs:
            if g not in wide or b not in wide:
                continue
            a, c = wide[g].to_numpy(dtype=float), wide[b].to_numpy(dtype=float)
            both = ~(np.isnan(a) | np.isnan(c))
            diff = d * (a[both] - c[both])
            wins += int((diff > 0).sum())
            ties += int((diff == 0).sum())
            total += len(diff)
        if total == 0:
            continue
        untied = total - ties
        p = float(stats.binomtest(wins, untied, 0.5, alternative="greater").pvalue) if untied else 1.0
        rows.append(dict(metric=metric, auroc=(wins + ties / 2) / total, n=untied, p=p))
    return pd.DataFrame(rows, columns=["metric", "auroc", "n", "p"])


def corruption_pairs(results: pd.DataFrame) -> list[tuple[str, str]]:
    """(method, its corruption control) for every corruption control of the run, the method read from the control's
    parameter ``of`` (in its rows' ``params``)."""
    if "params" not in results:
        return []
    rows = results[results["method"].isin(current().corruption_controls)].drop_duplicates("method")
    pairs = []
    for method, params in zip(rows["method"], rows["params"], strict=True):
        of = json.loads(params if isinstance(params, str) else "{}").get("method_params", {}).get("of")
        if of:
            pairs.append((of, method))
    return pairs


def truth_tau(results: pd.DataFrame) -> pd.DataFrame:
    """Per metric: mean over the hand-set models of Kendall's tau-b between the metric's method ranking (its direction
    applied) and the ranking by the tier's reference metric, the tier's controls left out (the report's metric
    agreement, :func:`~faithbench.bench.report.statistics.metric_agreement`, against the reference)."""
    frame = results[~results["is_control"].astype(bool) & results["rerun_of"].isna()]
    pairs = metric_agreement(frame)
    truth = current().truth_reference
    pairs = pairs[(pairs["metric_a"] == truth) | (pairs["metric_b"] == truth)]
    other = pairs["metric_b"].where(pairs["metric_a"] == truth, pairs["metric_a"])
    with warnings.catch_warnings():  # a metric that ties every method on every model: no mean
        warnings.simplefilter("ignore", RuntimeWarning)
        tau = pairs["tau"].groupby(other, sort=False).mean()
    return pd.DataFrame({"metric": tau.index, "tau_truth": tau.to_numpy()}, columns=["metric", "tau_truth"])


def _directions(results: pd.DataFrame) -> dict[str, float]:
    rows = results.drop_duplicates("metric")
    return {m: 1.0 if bool(h) else -1.0 for m, h in zip(rows["metric"], rows["higher_is_better"], strict=True)}


def _agreement(stats_: LeaderboardStats) -> dict[str, float]:
    a = stats_.agreement
    if a.empty:
        return {}
    both = pd.concat(
        [
            a[["metric_a", "tau"]].set_axis(["metric", "tau"], axis=1),
            a[["metric_b", "tau"]].set_axis(["metric", "tau"], axis=1),
        ]
    )
    return both.groupby("metric")["tau"].mean().to_dict()


def report_card(
    results: pd.DataFrame,
    samples: pd.DataFrame | None,
    stats_: LeaderboardStats,
    truth_results: pd.DataFrame | None = None,
    truth_samples: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The card: one row per metric of the run and of its ground-truth tier, the columns :data:`COLUMNS` (NaN where a
    question does not apply) plus the AUROCs' ``n`` and ``p`` and a ``verdict``."""
    card: dict[str, dict[str, Any]] = {}
    metrics = list(dict.fromkeys(results["metric"]))
    if truth_results is not None:
        metrics += [m for m in dict.fromkeys(truth_results["metric"]) if m not in metrics]
    for m in metric_order(metrics):
        card[m] = {c: math.nan for c in COLUMNS}
    if truth_results is not None and truth_samples is not None:
        auc = paired_auroc(truth_samples, _directions(truth_results), ["truth"], list(current().truth_corruptions))
        for r in auc.itertuples():
            card[r.metric].update({"AUROC truth": r.auroc, "n truth": r.n, "p truth": r.p})
        for r in truth_tau(truth_results).itertuples():
            card[r.metric]["tau truth"] = r.tau_truth
    if samples is not None:
        methods = [m for m in dict.fromkeys(results["method"]) if m not in MODEL_FREE and m != "oracle"]
        methods = [m for m in methods if not results.loc[results["method"] == m, "is_control"].astype(bool).any()]
        auc = paired_auroc(samples, _directions(results), methods, list(MODEL_FREE))
        for r in auc.itertuples():
            card[r.metric].update({"AUROC controls": r.auroc, "n controls": r.n, "p controls": r.p})
        pairs = corruption_pairs(results)
        auc = paired_auroc_of(samples, _directions(results), pairs)
        for r in auc.itertuples():
            card[r.metric].update({"AUROC corruptions": r.auroc, "n corruptions": r.n, "p corruptions": r.p})
        for pair in pairs:  # each corruption on its own (the CSV's extra columns)
            for r in paired_auroc_of(samples, _directions(results), [pair]).itertuples():
                card[r.metric][f"AUROC {pair[1]}"] = r.auroc
    if not stats_.reliability.empty:
        for metric, value in stats_.reliability.groupby("metric")["split_half"].mean().items():
            card[metric]["split-half"] = value
        for metric, value in stats_.reliability.groupby("metric")["alpha"].mean().items():
            card[metric]["alpha"] = value
    if not stats_.reruns.empty:
        for metric, rho in stats_.reruns.groupby("metric")["rerun_rho"].mean().items():
            card[metric]["rerun rho"] = rho
    for metric, tau in _agreement(stats_).items():
        card[metric]["agreement tau"] = tau
    table = pd.DataFrame.from_dict(card, orient="index").rename_axis("metric").reset_index()
    table["verdict"] = [_verdict(row) for row in table.to_dict("records")]
    return table


def _verdict(row: dict[str, Any]) -> str:
    asked = ("truth", "controls", "corruptions")
    tested = [(k, row.get(f"p {k}")) for k in asked if row.get(f"AUROC {k}") == row.get(f"AUROC {k}")]
    if not tested:
        return "–"
    chance = [k for k, p in tested if not (p == p and p < 0.05 and row[f"AUROC {k}"] > 0.5)]
    if not chance:
        return "tells faithful from unfaithful"
    return "no better than chance: " + ", ".join(f"vs {k}" for k in chance)


def card_text(card: pd.DataFrame) -> pd.DataFrame:
    """The card as the report shows it: two decimals, '–' where a question does not apply."""
    shown = card[["metric", *COLUMNS, "verdict"]].copy()
    for c in COLUMNS:
        shown[c] = [("–" if v != v else f"{v:.2f}") for v in shown[c]]
    return shown


def card_figure(card: pd.DataFrame, out: Path, plt: Any) -> Path | None:
    """The card as one heatmap a reader takes in at a glance: green where a metric does well, red where it fails,
    the value in every cell (AUROCs centred on their chance level 0.5, the rest on 0)."""
    if card.empty:
        return None
    values = card[COLUMNS].to_numpy(dtype=float)
    goodness = values.copy()
    goodness[:, :3] = 2 * (values[:, :3] - 0.5)  # AUROC: 0.5 is chance, 1 perfect, 0 always wrong
    fig, ax = plt.subplots(figsize=(min(WIDTH_IN, 10.0), 0.45 * len(card) + 1.8))
    image = ax.imshow(np.ma.masked_invalid(goodness), cmap="RdYlGn", vmin=-1, vmax=1, aspect="auto")
    for (i, j), v in np.ndenumerate(values):
        ax.text(j, i, "–" if v != v else f"{v:.2f}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(COLUMNS)), [c.replace(" ", "\n", 1) for c in COLUMNS])  # two lines: no overlap
    ax.set_yticks(
        range(len(card)),
        [
            f"{m}{' ✗' if v.startswith('no better') else ''}"
            for m, v in zip(card["metric"], card["verdict"], strict=True)
        ],
    )
    ax.xaxis.tick_top()
    ax.set_title("Report card of the metrics (✗: an AUROC no better than chance)", pad=28)
    fig.colorbar(image, ax=ax, fraction=0.03, label="worse  ←  chance  →  better")
    fig.tight_layout()
    return save(fig, out / "report_card.png", plt)


def run_card(run_dir: Path, results: pd.DataFrame, stats_: LeaderboardStats, tiers: list[str]) -> pd.DataFrame | None:
    """The card of the run in ``run_dir`` with its ground-truth tier (the run itself if it scored
    the reference metric, else the first of ``tiers`` holding a run that did); None when neither the run nor a tier
    has per-sample scores."""
    samples = read_samples(run_dir)
    truth_results = truth_samples = None
    if current().truth_reference in set(results["metric"]):  # the tier's own report
        truth_results, truth_samples = first_runs(results), samples
    for tier in tiers if truth_results is None else ():
        csv = run_dir / tier_folder(tier) / "results.csv"
        if csv.exists():
            found = read_results(csv)
            if current().truth_reference in set(found["metric"]):
                truth_results, truth_samples = first_runs(found), read_samples(csv.parent)
                break
    if samples is None and truth_samples is None:
        return None
    return report_card(first_runs(results), samples, stats_, truth_results, truth_samples)


def card_section_note() -> str:
    return (
        "Can each metric tell a faithful explanation from an unfaithful one? AUROC truth: on the ground-truth tier's "
        "hand-set models, P(the metric scores the exact attribution better than a planted corruption of it: shifted, "
        "another class's, negated) on the same sample; AUROC controls: on this run's models, P(a method's map scores "
        "better than a model-free control's: random, uniform, centre, edges); AUROC corruptions: P(a method's map "
        "scores better than a corruption of it: shuffled, another class's, on a randomised copy of the model). 0.5 is "
        "chance (ties count half); an AUROC is better than chance when a one-sided sign test rejects 0.5 at 0.05. "
        "tau truth: Kendall's tau between the metric's ranking of the tier's methods and their ranking by agreement "
        f"with the exact attribution ({current().truth_reference}). Split-half, rerun rho and agreement tau: as in the "
        "sections above (means)."
    )
