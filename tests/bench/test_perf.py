"""``python -m bench perf``: the harness at tiny sizes (timings are not asserted, only what they mean)."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

import faithbench.bench.perf.harness as perf
import faithbench.bench.perf.rows as rows
from faithbench.attributions import get_method
from faithbench.bench.cli import main
from faithbench.bench.perf.cases import BCOS_METHODS, DEFAULT_CASES, QUICK_CASES
from faithbench.bench.perf.harness import COLUMNS, PerfCase, PerfSizes, format_table, measurement_errors, run_perf
from faithbench.bench.perf.limits import LIMITS, Work, method_limit
from faithbench.bench.perf.markdown import docs_table
from faithbench.bench.perf.markdown import main as markdown_main
from faithbench.bench.perf.quantus import agreement, flip_steps
from faithbench.bench.perf.timing import FLOOR, CallCounter, Ratio, build_model, in_turns, pair_ratio, probe
from faithbench.errors import UserError

CPU = torch.device("cpu")
REQUIRED = [
    "what", "implementation", "model", "device", "n_images", "pairs", "seconds", "seconds_min", "seconds_max",
    "images_per_s", "model_calls", "ratio_to_quantus", "ratio_to_quantus_min", "ratio_to_quantus_max",
    "ratio_to_limit", "ratio_to_limit_min", "ratio_to_limit_max", "status", "peak_memory_mb", "agrees",
]  # fmt: skip
TINY = PerfSizes(
    repeats=2,
    warmup=0,
    min_seconds=0.0,
    fractions=(0.0, 0.25, 0.5),
    erasure_fractions=(0.1, 0.5),
    flip_steps=3,
    regions=3,
    n_quantus=2,
    chunk_size=8,
    continuity_steps=4,  # shifts of 48 px: -24, 24, 48 (0 left out); of 28 px: -14, 14, 28
    smprt_depths=2,
    smprt_noisy=2,
    method_params={
        "integrated_gradients": {"n_steps": 2},
        "lime": {"n_samples": 4},
        "shapley_sampling": {"n_samples": 1},
    },
)
# 48 px: 3 divides 48², so Quantus PixelFlipping can flip whole RGB pixels; 16 px blocks: 9 regions.
CASES = (
    PerfCase("resnet18", 48, 4, 16, ("gradient", "integrated_gradients", "native")),
    PerfCase("bcos_cnn_mnist", 28, 4, 4, BCOS_METHODS),
)


@pytest.fixture(autouse=True)
def one_thread():
    """One thread: a shared 2-core CPU with two threads per process slows everything down many times."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("quantus")
    out = tmp_path_factory.mktemp("perf")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = run_perf("cpu", cases=CASES, sizes=TINY, out=out)
    finally:
        torch.set_num_threads(before)
    return run, out


def test_the_csv_has_every_column_and_one_row_per_measurement(tiny):
    run, out = tiny
    table = pd.read_csv(out / "perf.csv")
    assert list(table.columns) == COLUMNS and set(REQUIRED) <= set(table.columns)
    assert len(table) == len(run.table) and (table["seconds"] > 0).all() and (table["pairs"] == 2).all()
    assert ((table["seconds_min"] <= table["seconds"]) & (table["seconds"] <= table["seconds_max"])).all()
    assert set(table["implementation"]) == {"faithbench", "quantus", "captum", "torchcam", "limit"}
    assert table["peak_memory_mb"].isna().all()  # CPU: PyTorch keeps no allocator statistics
    meta = json.loads((out / "perf.json").read_text())
    assert meta["provenance"]["device"].startswith("cpu") and meta["sizes"]["n_quantus"] == 2
    assert meta["errors"] == run.errors and "in turns" in meta["timing"]
    # native refuses the standard ResNet (a note, no row); the B-cos CNN runs every method, each with its limit
    methods = table[table["kind"] == "method"]
    resnet = methods[methods["model"] == "resnet18"]
    assert set(resnet["what"]) == {"gradient", "integrated_gradients"}
    bcos = methods[methods["model"] == "bcos_cnn_mnist"]
    assert sorted(bcos.loc[bcos["implementation"] == "limit", "what"]) == sorted(BCOS_METHODS)
    assert any("'native' cannot explain model 'resnet18'" in n for n in run.notes)


def test_every_ratio_to_a_limit_has_a_spread_and_a_status(tiny):
    table = tiny[0].table
    ours = table[table["implementation"] == "faithbench"]
    with_limit = ours[ours["ratio_to_limit"].notna()]
    # the 9 model-based metrics (consistency and average_drop among them) and the 10 rows that explain again or
    # perturb (the robustness family, infidelity, continuity, random_logit, emprt, smprt, adcc) of both models, the
    # methods
    assert len(with_limit) == 2 * (9 + 10) + 2 + len(BCOS_METHODS)
    low, mid, high = (with_limit[f"ratio_to_limit{e}"] for e in ("_min", "", "_max"))
    assert ((low <= mid) & (mid <= high) & (low > 0)).all()
    assert set(with_limit["status"]) <= {"ok", "measurement error"}
    assert (with_limit["status"] == np.where(mid < FLOOR, "measurement error", "ok")).all()
    assert (ours.loc[ours["ratio_to_limit"].isna(), "status"] == "").all()
    assert len(tiny[0].errors) == int((with_limit["status"] == "measurement error").sum())


def test_faithbench_and_quantus_agree_on_every_quantus_row(tiny):
    table = tiny[0].table
    quantus = table[table["implementation"] == "quantus"]
    per_model = {m: set(g["what"]) for m, g in quantus.groupby("model")}
    paired = {
        "deletion (PixelFlipping)",
        "deletion (RegionPerturbation)",
        "grid_pointing_game",
        "explanation_entropy",
        "gini_index",
        "effective_complexity",
        "consistency",
        "max_sensitivity",
        "avg_sensitivity",
        "local_lipschitz",
        "relative_input_stability",
        "continuity",
        "random_logit",
        "emprt",
        "smprt",
    }
    assert per_model == {"resnet18": paired, "bcos_cnn_mnist": paired}
    assert quantus["agrees"].astype(bool).all() and (quantus["n_images"] == 2).all()
    ours = table[(table["implementation"] == "faithbench") & table["what"].isin(paired)]
    assert ours["agrees"].astype(bool).all() and (ours["ratio_to_quantus"] > 0).all()
    assert (ours["ratio_to_quantus_min"] <= ours["ratio_to_quantus_max"]).all()
    assert (quantus.loc[quantus["what"] == "explanation_entropy", "model_calls"] == 0).all()


def test_faithbench_and_captum_agree_on_every_captum_row(tiny):
    """captum's sensitivity_max and infidelity on the same draws, on every image of the case (captum batches)."""
    table = tiny[0].table
    captum = table[table["implementation"] == "captum"]
    assert {m: set(g["what"]) for m, g in captum.groupby("model")} == {
        "resnet18": {"max_sensitivity", "infidelity"}, "bcos_cnn_mnist": {"max_sensitivity", "infidelity"}
    }  # fmt: skip
    assert captum["agrees"].astype(bool).all() and (captum["n_images"] == 4).all()
    ours = table[(table["implementation"] == "faithbench") & table["what"].isin(["max_sensitivity", "infidelity"])]
    assert (ours["ratio_to_captum"] > 0).all() and (ours["ratio_to_captum_min"] <= ours["ratio_to_captum_max"]).all()


def test_faithbench_and_torchcam_agree_on_average_drop(tiny):
    """torch-cam's ClassificationMetric given faithbench's masks, on every image in one update: its batch means of
    Average Drop and Increase in Confidence are faithbench's (with its 1e-7 in the drop's denominator)."""
    pytest.importorskip("torchcam")
    table = tiny[0].table
    torchcam = table[table["implementation"] == "torchcam"]
    assert {m: set(g["what"]) for m, g in torchcam.groupby("model")} == {
        "resnet18": {"average_drop"}, "bcos_cnn_mnist": {"average_drop"}
    }  # fmt: skip
    assert torchcam["agrees"].astype(bool).all() and (torchcam["n_images"] == 4).all()
    assert (torchcam["model_calls"] == 2).all()  # the images and the masked images, one call each
    ours = table[(table["implementation"] == "faithbench") & (table["what"] == "average_drop")]
    assert (ours["ratio_to_torchcam"] > 0).all() and ours["ratio_to_quantus"].isna().all()


def test_the_peers_agree_only_on_the_same_numbers():
    """The agreement the new rows need is not vacuous: torch-cam's means off by 1e-3 and a RandomLogit of other
    classes than Quantus drew disagree."""
    from faithbench.bench.perf.peers import average_drop_quantity, random_logit_quantity

    quantus = pytest.importorskip("quantus")
    pytest.importorskip("torchcam")
    model = build_model("bcos_cnn_mnist", CPU, 0)
    gen = torch.Generator().manual_seed(0)
    inputs = model.encode(torch.rand(3, 1, 28, 28, generator=gen))
    maps, targets = torch.randn(3, 28, 28, generator=gen), torch.tensor([1, 2, 3])
    ours, (peer,), means, _ = average_drop_quantity(model.module, inputs, maps, targets, activation=model.activation,
                                                    chunk_size=2, torchcam=True)  # fmt: skip
    mine, theirs = ours(), peer.fn()
    assert agreement(*means(mine, theirs))[0] and 0 < theirs["avg_drop"] < 1
    off = {**theirs, "avg_drop": theirs["avg_drop"] + 1e-3}
    assert not agreement(*means(mine, off))[0]

    method = get_method("input_x_gradient")

    def explain(x, t):
        return method.attribute(model, x, t, max_batch=2)

    q = random_logit_quantity(explain, model.module, inputs, targets, explain(inputs, targets), n_classes=10,
                              n_quantus=3, quantus=quantus)  # fmt: skip
    (other_classes,) = (t for x, t in q.explains)
    assert (other_classes != targets).all() and agreement(q.faithbench(), q.peers[0].fn())[0]
    shifted = (other_classes + 1) % 10
    shifted = torch.where(shifted == targets, (shifted + 1) % 10, shifted)
    from faithbench.metrics.sanity import map_similarity

    elsewhere = map_similarity(explain(inputs, targets), explain(inputs, shifted), "quantus-ssim")
    assert not agreement(elsewhere, q.peers[0].fn())[0]


def test_the_randomisation_tests_agree_with_quantus_only_on_the_same_layers_and_draws():
    """eMPRT and sMPRT agree with Quantus' EfficientMPRT and SmoothMPRT made to randomise faithbench's layers (and to
    draw its noise); faithbench's cascade of another seed (other weights; for sMPRT other draws too) disagrees with
    them, and Quantus is itself again after each call (its layer generator and its length, ``quantus.explain``,
    ``np.random.randn``)."""
    from quantus.helpers.model.pytorch_model import PyTorchModel

    from faithbench.bench.perf.randomised import emprt_quantity, smprt_quantity

    quantus = pytest.importorskip("quantus")
    model, method = build_model("bcos_cnn_mnist", CPU, 0), get_method("input_x_gradient")
    images = torch.rand(3, model.encoding.image_channels, 28, 28, generator=torch.Generator().manual_seed(0))
    inputs = model.encode(images)
    targets = model.predict_logits(images, batch_size=4, device=CPU).argmax(dim=1)
    maps = method.attribute(model, inputs, targets, max_batch=4)
    sizes = replace(TINY, n_quantus=3, chunk_size=4, smprt_noisy=3)
    patched = (PyTorchModel.get_random_layer_generator, vars(PyTorchModel)["random_layer_generator_length"],
               quantus.explain, np.random.randn)  # fmt: skip

    def emprt(seed):
        return emprt_quantity(model, method, images, inputs, targets, maps, sizes=sizes, quantus=quantus, seed=seed)

    def smprt(seed):
        return smprt_quantity(model, method, images, inputs, targets, sizes=sizes, quantus=quantus, seed=seed)

    for build in (emprt, smprt):
        same = build(0)
        theirs = same.peers[0].fn()
        now = (PyTorchModel.get_random_layer_generator, vars(PyTorchModel)["random_layer_generator_length"],
               quantus.explain, np.random.randn)  # fmt: skip
        assert all(a is b for a, b in zip(now, patched, strict=True))
        ours, quantus_values = same.pair(same.faithbench(), theirs)
        assert agreement(ours, quantus_values)[0] and ours.shape[0] == 3
        assert not agreement(*same.pair(build(1).faithbench(), theirs))[0]
    assert quantus_values.shape == (3, 3) and np.allclose(quantus_values[:, 0], 1.0)  # sMPRT: "original", 2 points
    assert (quantus_values[:, 1:] < 0.9).all()  # the randomised models' maps are other maps


def test_the_randomisation_and_adcc_limits_make_their_rows_model_calls_and_draw_the_weights(tiny, monkeypatch):
    """eMPRT: the 4 images explained on the trained and the fully randomised model (one call each); sMPRT: their 2
    noisy copies (8 inputs) on the trained model and at 2 cascade points; ADCC: the forwards of the images and of the
    masked images, and the masked images explained. The cascade's limit re-initialises every layer of its copy, point
    by point, in each run, and leaves the trained model as it was."""
    from faithbench.bench.perf import randomised

    limits = tiny[0].table[tiny[0].table["implementation"] == "limit"]
    calls = {(r.what, r.model): (r.model_calls, r.model_inputs) for r in limits.itertuples()}
    for name in ("resnet18", "bcos_cnn_mnist"):
        assert calls["emprt", name] == (2, 8) and calls["smprt", name] == (3, 24) and calls["adcc", name] == (3, 12)
    notes = limits.set_index(["what", "model"])["note"]
    assert "then 1 randomised state(s) (41 layers re-initialised in place, default" in notes["emprt", "resnet18"]
    assert "then 2 randomised state(s) (11 layers" in notes["smprt", "bcos_cnn_mnist"]
    assert notes["adcc", "resnet18"].startswith("the images' and the masked images' forwards, no_grad; one forward")

    drawn = []
    real = randomised.randomise_layer
    monkeypatch.setattr(randomised, "randomise_layer", lambda layer, *a: drawn.append(layer) or real(layer, *a))
    model, method = build_model("bcos_cnn_mnist", CPU, 0), get_method("input_x_gradient")
    inputs, targets = model.encode(torch.rand(2, 1, 28, 28)), torch.tensor([1, 2])
    points = randomised.cascade_points(model.module, 2)
    assert [len(p) for p in points] == [6, 5] and points[0][0] == randomised.parameter_layers(model.module)[-1][0]
    trained = {k: v.clone() for k, v in model.module.state_dict().items()}
    limit = randomised.cascade_limit(model, method, 4, (inputs, targets), points, "default", 0, None)
    limit.run()
    limit.run()
    assert len(drawn) == 2 * 11 and len({id(layer) for layer in drawn}) == 11
    assert all(torch.equal(v, model.module.state_dict()[k]) for k, v in trained.items())
    assert not any(layer is m for layer in drawn for _, m in randomised.parameter_layers(model.module))


def test_mst_compactness_is_timed_alone_without_model_work_or_a_peer(tiny):
    """MST compactness asks no model and has no peer in Quantus 0.6.0 (MSTC is in Quantus main only): a faithbench row
    alone, without a limit or a ratio; ADCC, which no peer defines either, has its limit alone."""
    table = tiny[0].table
    mst = table[table["what"] == "mst_compactness"]
    assert list(mst["implementation"]) == ["faithbench"] * 2 and set(mst["model"]) == {"resnet18", "bcos_cnn_mnist"}
    assert (mst["model_calls"] == 0).all() and mst["ratio_to_limit"].isna().all() and (mst["status"] == "").all()
    assert mst["note"].str.contains("no peer: MSTC is not in Quantus 0.6.0; no model work").all()
    assert (mst["images_per_s"] > 0).all() and mst["ratio_to_quantus"].isna().all()
    adcc = table[table["what"] == "adcc"]
    assert sorted(adcc["implementation"]) == ["faithbench", "faithbench", "limit", "limit"]


def test_every_limit_makes_the_same_model_calls_as_its_row(tiny):
    table = tiny[0].table
    limits = table[table["implementation"] == "limit"]
    assert len(limits) == 2 * (9 + 10) + 2 + len(BCOS_METHODS)
    for _, limit in limits.iterrows():
        ours = table[
            (table["implementation"] == "faithbench")
            & (table["what"] == limit["what"])
            & (table["model"] == limit["model"])
        ].iloc[0]
        assert (ours["model_calls"], ours["model_inputs"]) == (limit["model_calls"], limit["model_inputs"])
        assert ours["model_calls"] > 0 and ours["ratio_to_limit"] > 0
    # deletion of 4 images at 3 fractions, at most 8 inputs per call: 12 inputs in calls of 8 and 4
    row = table[(table["what"] == "pixel_deletion") & (table["model"] == "resnet18")].iloc[0]
    assert (row["model_calls"], row["model_inputs"]) == (2, 12)
    # continuity: the 4 images (one call), then their 3 translations each (12 inputs in calls of 8 and 4), each call
    # of input x gradient one forward pass; average_drop: the images and the masked images, one call each
    calls = {(r.what, r.model): (r.model_calls, r.model_inputs) for r in limits.itertuples()}
    assert calls["continuity", "resnet18"] == (3, 16) and calls["average_drop", "resnet18"] == (2, 8)
    assert calls["random_logit", "resnet18"] == (1, 4) and calls["consistency", "resnet18"] == (1, 4)
    continuity = limits[limits["what"] == "continuity"]
    assert continuity["note"].str.startswith("2 batches in turn: one forward + backward").all()


def test_every_method_of_the_cases_has_a_limit():
    timed = {m for case in (*QUICK_CASES, *DEFAULT_CASES) for m in case.methods}
    assert timed <= set(LIMITS)


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_each_limit_does_the_model_work_of_its_method_in_the_same_calls(name):
    # 5 inputs at most 2 per call: the chunks, IG's passes and the sampling methods' calls all split. The B-cos CNN
    # runs every method but native_normalised, which needs the B-cosified CNN's input-normalisation layer 0.
    model = build_model("bcosified_cnn_mnist" if name == "native_normalised" else "bcos_cnn_mnist", CPU, 0)
    gen = torch.Generator().manual_seed(0)
    inputs = model.encode(torch.rand(5, 1, 28, 28, generator=gen))
    targets = torch.tensor([0, 1, 2, 3, 4])
    params = {"integrated_gradients": {"n_steps": 3}, "lime": {"n_samples": 4}, "shapley_sampling": {"n_samples": 1}}
    method = get_method(name, **params.get(name, {}))
    # native_normalised calls the layers after layer 0 as a model of their own: count the calls of layer 1
    counter = CallCounter(model.module[1] if name == "native_normalised" else model.module)
    try:
        first = probe(lambda: method.attribute(model, inputs, targets, max_batch=2), counter)
        limit = method_limit(Work(model, method, inputs, targets, 2, first.inputs))
        counter.sizes.clear()
        limit.run()
        limit_sizes = tuple(counter.sizes)
    finally:
        counter.close()
    assert limit_sizes == first.sizes and len(first.sizes) > 1 and limit.note
    if name not in ("lime", "shapley_sampling"):  # the gradient family: one call per chunk of 2 (IG: per pass)
        assert first.sizes == ((2, 2, 2, 2, 2, 2, 2, 1) if name == "integrated_gradients" else (2, 2, 1))


def test_the_sides_run_in_turns_and_the_ratio_is_taken_pair_by_pair():
    log = []
    durations = iter([2.0, 1.0, 4.0, 1.0, 6.0, 2.0])  # A B A B A B after the warm-up
    now = [0.0]
    reads = []

    def clock():
        reads.append(log[-1] if log else "")
        if len(reads) % 2 == 0:  # the second read of a run: that run's duration has passed
            now[0] += next(durations)
        return now[0]

    sides = in_turns(
        [lambda: log.append("A") or "a", lambda: log.append("B") or "b"], repeats=3, warmup=1, device=CPU, clock=clock
    )
    assert log == ["A", "B"] * 4  # one warm-up round, untimed, then three rounds
    a, b = sides
    assert a.times == (2.0, 4.0, 6.0) and b.times == (1.0, 1.0, 2.0)
    assert (a.seconds, a.low, a.high, a.result) == (4.0, 2.0, 6.0, "a") and b.seconds == 1.0
    ratio = pair_ratio(a, b)  # pairs 2, 4, 3: the ratio of the medians (4 / 1) would mix rounds
    assert (ratio.median, ratio.low, ratio.high) == (3.0, 2.0, 4.0)
    assert pair_ratio(a, b, scale=0.5).median == 1.5
    with pytest.raises(ValueError, match="repeats"):
        in_turns([lambda: None], repeats=0, warmup=0, device=CPU)


def test_three_sides_take_turns_and_fast_sides_are_called_several_times_per_run():
    log = []
    now = [0.0]

    def clock():
        return now[0]

    def side(name, seconds):
        def run():
            log.append(name)
            now[0] += seconds

        return run

    # warm-up: A takes 1/64 s, B 1/8 s, C 1/32 s; min_seconds 1/16: A runs 4 times per timed run, C twice
    sides = in_turns(
        [side("A", 1 / 64), side("B", 1 / 8), side("C", 1 / 32)],
        repeats=2,
        warmup=1,
        device=CPU,
        min_seconds=1 / 16,
        clock=clock,
    )
    assert log == ["A", "B", "C"] + (["A"] * 4 + ["B"] + ["C"] * 2) * 2
    assert [s.times for s in sides] == [(1 / 64, 1 / 64), (1 / 8, 1 / 8), (1 / 32, 1 / 32)]  # per call


def test_a_ratio_below_the_floor_is_a_measurement_error():
    assert Ratio(0.94, 0.9, 1.0).status == "measurement error"
    assert Ratio(FLOOR, 0.9, 1.0).status == "ok" and Ratio(3.0, 2.0, 4.0).status == "ok"
    table = pd.DataFrame(
        {
            "what": ["gradient", "lime"],
            "model": ["m", "m"],
            "ratio_to_limit": [0.5, 1.2],
            "ratio_to_limit_min": [0.4, 1.1],
            "ratio_to_limit_max": [0.6, 1.3],
            "status": ["measurement error", "ok"],
        }
    )
    (error,) = measurement_errors(table)
    assert error.startswith("gradient on m: 0.5x its limit (pairs 0.4-0.6) is below 0.95")


def test_the_printed_table_shows_medians_with_their_spread(tiny):
    text = format_table(tiny[0].table)
    header = text.splitlines()[0].split()
    assert header == [
        "what", "implementation", "model", "n_images", "pairs", "ms", "images_per_s", "model_calls",
        "ratio_to_quantus", "ratio_to_limit", "status", "peak_memory_mb", "agrees", "max_abs_diff",
    ]  # fmt: skip
    gradient = next(line for line in text.splitlines() if line.startswith("gradient") and " faithbench " in line)
    assert gradient.count("(") == 2 and gradient.count("-") >= 2  # ms and ratio: median (min-max)


def test_the_docs_table_states_every_run_and_the_spread_across_runs(tiny, tmp_path, capsys):
    first = tiny[0].table.copy()
    first["status"] = "ok"  # the tiny run's own ratios depend on the machine's load: only run 2 is flagged here
    second = first.copy()
    flagged = (second["what"] == "gradient") & (second["implementation"] == "faithbench")
    second.loc[flagged, ["ratio_to_limit", "ratio_to_limit_min", "ratio_to_limit_max"]] = [0.5, 0.4, 0.6]
    second.loc[flagged, "status"] = "measurement error"
    text = docs_table([first, second])
    lines = text.splitlines()
    assert lines[0].startswith("| what | model | against | faithbench ms (runs) | run 1 | run 2 | medians across runs")
    row = next(line for line in lines if line.startswith("| gradient | resnet18 | limit: one forward + backward"))
    assert row.endswith("| measurement error (run 2) |") and "| 0.5 (0.4-0.6) |" in row
    assert any("| Quantus, per image |" in line for line in lines)
    first.to_csv(tmp_path / "a.csv", index=False)
    second.to_csv(tmp_path / "b.csv", index=False)
    assert markdown_main([str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]) == 0
    assert capsys.readouterr().out == text


def test_a_disagreeing_pair_gets_no_ratio(monkeypatch):
    pytest.importorskip("quantus")
    monkeypatch.setattr("faithbench.bench.perf.rows.agreement", lambda ours, theirs: (False, 1.0))
    case = PerfCase("bcos_cnn_mnist", 28, 2, 4, ())
    table = run_perf("cpu", cases=[case], sizes=TINY).table
    paired = table[table["agrees"].notna()]
    # 7 Quantus pairs, 8 quantities that explain again with Quantus (4 robustness, continuity, random_logit, emprt,
    # smprt), captum's sensitivity_max (1 more row) and infidelity, torch-cam's average_drop (2 rows each)
    assert len(paired) == 2 * 7 + 2 * 8 + 1 + 2 + 2 and not paired["agrees"].astype(bool).any()
    assert paired["ratio_to_quantus"].isna().all() and paired["ratio_to_captum"].isna().all()
    assert paired["ratio_to_torchcam"].isna().all()


def test_agreement_and_pixel_flipping_steps():
    assert agreement(torch.tensor([0.5, 0.25]), [0.5, 0.25 + 1e-9]) == (True, pytest.approx(1e-9))
    assert not agreement(torch.tensor([0.5, 0.25]), [0.5, 0.26])[0]
    assert not agreement(torch.tensor([0.5, 0.25]), [0.5])[0]
    assert flip_steps(224 * 224, 3, 16) is None  # 3 does not divide 224²: no whole-pixel RGB steps
    assert flip_steps(28 * 28, 2, 16) == 16 and flip_steps(96 * 96, 3, 6) == 6 and flip_steps(48 * 48, 3, 4) == 6


def test_an_unknown_device_fails_with_one_clear_line(capsys):
    with pytest.raises(UserError, match="unknown device 'tpu'"):
        run_perf("tpu")
    assert main(["perf", "--device", "tpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown device 'tpu'")
    assert main(["perf", "--device", "cpu", "--repeats", "0"]) == 2
    assert "repeats must be a positive integer" in capsys.readouterr().err


def _quick_without_quantus(monkeypatch):
    """--quick with its sizes shrunk, and Quantus "missing"."""
    monkeypatch.setattr(perf, "QUICK_CASES", (PerfCase("bcos_cnn_mnist", 28, 2, 4, ("gradient",)),))
    monkeypatch.setattr(perf, "QUICK_SIZES", replace(TINY, repeats=2))
    monkeypatch.setattr(
        "faithbench.bench.perf.harness.import_quantus", lambda: (None, "quantus is not importable (test)")
    )


def test_the_command_line_prints_the_table_without_quantus(tmp_path, monkeypatch, capsys):
    _quick_without_quantus(monkeypatch)
    assert main(["perf", "--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "note: quantus is not importable (test)" in out and "pixel_deletion" in out
    assert "ratio_to_limit" in out.splitlines()[0] and "status" in out.splitlines()[0]
    table = pd.read_csv(tmp_path / "perf.csv")
    assert "quantus" not in set(table["implementation"]) and np.isnan(table["ratio_to_quantus"]).all()
    assert set(table["what"]) >= {"pixel_deletion", "gradient"}
    gradient = table[table["what"] == "gradient"]
    assert list(gradient["implementation"]) == ["faithbench", "limit"]
    errors = bool((table["status"] == "measurement error").any())
    assert ("measurement error: " in out) == errors and ("every ratio to a limit is at least" in out) != errors


def test_the_command_line_says_which_ratios_are_measurement_errors(tmp_path, monkeypatch, capsys):
    # faithbench "twice as fast as its limit" in every pair: impossible, so reported as a measurement error
    _quick_without_quantus(monkeypatch)
    real = rows.in_turns

    def faithbench_fast(fns, **kwargs):
        sides = real(fns, **kwargs)
        return [replace(s, times=tuple(1.0 if k == 0 else 2.0 for _ in s.times)) for k, s in enumerate(sides)]

    monkeypatch.setattr(rows, "in_turns", faithbench_fast)
    assert main(["perf", "--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "measurement error: gradient on bcos_cnn_mnist: 0.5x its limit (pairs 0.5-0.5) is below 0.95" in out
    table = pd.read_csv(tmp_path / "perf.csv")
    ours = table[table["implementation"] == "faithbench"]
    timed = ours[ours["what"] != "mst_compactness"]  # the one row without a limit: it asks no model
    assert (timed["status"] == "measurement error").all() and (timed["ratio_to_limit"] == 0.5).all()
    assert ours.loc[ours["what"] == "mst_compactness", "ratio_to_limit"].isna().all()
    errors = json.loads((tmp_path / "perf.json").read_text())["errors"]
    assert len(errors) == len(timed) and any(e.startswith("pixel_deletion on bcos") for e in errors)


def test_only_some_parts_and_a_case_from_the_command_line(tmp_path):
    """``--only robustness`` times the robustness family, infidelity, continuity, RandomLogit, eMPRT, sMPRT and ADCC
    alone (the metrics that explain again); ``--case MODEL:PX:BATCH`` names a case (the default case's methods for a
    known model); both refuse what they do not know, naming the valid choices."""
    from faithbench.bench.perf.cases import parse_case

    case = parse_case("bcos_cnn_mnist:28:2")
    assert (case.model, case.image_size, case.batch_size, case.block_size) == ("bcos_cnn_mnist", 28, 2, 2)
    assert case.methods == BCOS_METHODS and parse_case("resnet18:224:4").block_size == 16
    with pytest.raises(ValueError, match="MODEL:PX:BATCH with positive integers"):
        parse_case("resnet18:224")
    with pytest.raises(UserError, match="unknown perf part\\(s\\) metric; valid: metrics, robustness, methods"):
        run_perf("cpu", cases=[case], sizes=TINY, only=["metric"])
    run = run_perf("cpu", cases=[case], sizes=replace(TINY, robust_draws=2, infidelity_perturbations=2),
                   only=["robustness"], out=tmp_path)  # fmt: skip
    ours = run.table[run.table["implementation"] == "faithbench"]
    assert set(ours["what"]) == {"max_sensitivity", "avg_sensitivity", "local_lipschitz", "relative_input_stability",
                                 "infidelity", "continuity", "random_logit", "emprt", "smprt", "adcc"}  # fmt: skip
    assert json.loads((tmp_path / "perf.json").read_text())["parts"] == ["robustness"]
