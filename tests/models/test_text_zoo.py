"""The text zoo's training to a plateau (issue 25 item 13): when it stops, which weights it keeps, what it records."""

import pytest
import torch
from torch import nn

from faithbench.bench.run.suite import load_suite
from faithbench.models.zoo import text_recipes as text_zoo
from faithbench.models.zoo.entries import RECIPES
from faithbench.models.zoo.text_training import Plateau


class Scripted(nn.Module):
    """A stand-in model whose 'validation accuracy' each epoch is scripted; its weight records the epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch = nn.Parameter(torch.zeros(()))


def scripted(accuracies: list[float]):
    """An ``accuracy(model, split)`` whose validation accuracy follows ``accuracies``; test = validation - 0.01."""
    script, current = iter(accuracies), {}

    def accuracy(model, split):
        if split == "validation":
            current["v"] = next(script)
            return current["v"]
        return current["v"] - 0.01

    return accuracy


def run(plateau: Plateau, max_epochs: int = 10) -> int:
    model = Scripted()
    for epoch in range(1, max_epochs + 1):
        with torch.no_grad():
            model.epoch.fill_(epoch)
        if plateau(model):
            return epoch
    return max_epochs


def test_stops_after_the_first_epoch_that_gains_too_little_and_keeps_the_best():
    p = Plateau(min_delta=0.005, patience=1, accuracy=scripted([0.70, 0.75, 0.77, 0.772, 0.9]))
    epochs = run(p)
    assert epochs == 4  # 0.772 gains 0.2 points on 0.77: plateau
    assert p.best_state["epoch"].item() == 3 and p.kept_epoch == 3
    rec = p.record()
    assert rec["validation_accuracy_by_epoch"] == [0.70, 0.75, 0.77, 0.772]
    assert rec["test_accuracy_by_epoch"] == pytest.approx([0.69, 0.74, 0.76, 0.762])
    assert rec["kept_epoch"] == 3 and rec["plateau"] == {"min_delta": 0.005, "patience": 1}


def test_patience_counts_stale_epochs_in_a_row_and_a_drop_is_stale():
    p = Plateau(min_delta=0.005, patience=2, accuracy=scripted([0.60, 0.58, 0.70, 0.69, 0.702, 0.99]))
    epochs = run(p)
    assert epochs == 5 and p.kept_epoch == 3 and p.best_state["epoch"].item() == 3


def test_the_budget_ends_training_that_keeps_improving():
    p = Plateau(min_delta=0.005, patience=1, accuracy=scripted([0.5, 0.6, 0.7]))
    epochs = run(p, max_epochs=3)
    assert epochs == 3 and p.kept_epoch == 3


def test_the_sweep_recipes_train_to_a_plateau_and_the_ci_models_keep_their_recipes():
    for tag in ("_b1", "_b1_25", "_b1_5", "_b2", "_b2_5"):
        r = RECIPES.get(f"bcos_minilm3_rt{tag}")
        assert r.params["plateau"] == {"min_delta": 0.005, "patience": 1, "floor": "majority"}
        assert r.params["epochs"] == 5
        trained = "until validation accuracy gains < 0.5 points 1 time(s) in a row once above the majority-class rate"
        assert trained in r.description
    for name, epochs in (("bcos_minilm3_rt", 2), ("minilm1_rt", 1), ("bcos_minilm1_rt", 2)):  # no plateau
        ci = RECIPES.get(name)  # bcos_minilm3_rt: the sweep's B = 1.5 at a fixed budget; *1_rt: smoke-text's models
        assert "plateau" not in ci.params and ci.params["epochs"] == epochs
    assert load_suite("smoke-text").models == ("minilm1_rt", "bcos_minilm1_rt")


def test_epochs_at_the_majority_rate_are_not_a_plateau():
    """A model that still predicts one class (the validation split's majority rate, 0.57) has not begun to learn: the
    B = 2.5 builds that stopped after 2 epochs at 56 % held out. Stale epochs count once the best beats the floor."""
    accuracies = [0.5702, 0.5702, 0.5717, 0.66, 0.75, 0.752, 0.9]
    without = Plateau(min_delta=0.005, patience=1, accuracy=scripted(accuracies))
    assert run(without) == 2 and without.kept_epoch == 1
    p = Plateau(min_delta=0.005, patience=1, accuracy=scripted(accuracies), floor=0.5702)
    assert run(p) == 6 and p.kept_epoch == 5 == p.best_state["epoch"].item()
    assert p.record()["plateau"] == {"min_delta": 0.005, "patience": 1, "floor": 0.5702}
    stuck = Plateau(min_delta=0.005, patience=1, accuracy=scripted([0.5702] * 5), floor=0.5702)
    assert run(stuck, max_epochs=5) == 5 and stuck.kept_epoch == 1  # the whole budget, then the first epoch's weights


def test_the_majority_floor_is_the_validation_split_majority_rate():
    p = RECIPES.get("bcos_minilm3_rt_b2_5").params
    labels = text_zoo._validation("rotten-tomatoes")[1]
    floor = text_zoo._plateau(p["plateau"], p)["floor"]
    assert floor == pytest.approx(max((labels == c).double().mean().item() for c in (0, 1))) and 0.5 < floor < 0.6
    assert text_zoo._plateau({"min_delta": 0.01, "patience": 2}, p) == {"min_delta": 0.01, "patience": 2}


def test_a_plateau_needs_a_validation_split():
    with pytest.raises(ValueError, match="needs an offline data set"):
        text_zoo._validation("ag-news")


def test_small_gains_add_up_against_the_kept_epoch_and_the_record_names_the_weights_kept():
    """Gains are measured against the kept epoch (as Keras' EarlyStopping does): 0.703 is stale against 0.70, 0.706
    is not; the recorded epoch is the one whose weights are kept."""
    p = Plateau(min_delta=0.005, patience=3, accuracy=scripted([0.70, 0.703, 0.706, 0.0, 0.0, 0.0]))
    assert run(p) == 6
    assert p.kept_epoch == 3 == p.best_state["epoch"].item() == p.record()["kept_epoch"]


def test_frozen_parameters_keep_their_values_and_their_flags_and_an_unknown_name_is_an_error():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(8 * 4, 2))
    model.forward = lambda ids, mask: nn.Sequential.forward(model, ids)  # text_logits passes (ids, mask)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids, labels = torch.randint(1, 50, (16, 4)), torch.randint(0, 2, (16,))
    train = dict(epochs=1, lr=1e-2, batch_size=8, seed=0, loss="ce", pad=0)
    text_zoo.train_text_classifier(model, ids, labels, frozen=["0.weight"], **train)
    after = model.state_dict()
    assert torch.equal(after["0.weight"], before["0.weight"])  # no gradient step, no weight decay
    assert not torch.equal(after["2.weight"], before["2.weight"])  # the rest trained
    assert all(p.requires_grad for p in model.parameters())  # the flags as they were
    with pytest.raises(ValueError, match=r"frozen names no parameter of the model: \['embedding.weight'\]"):
        text_zoo.train_text_classifier(model, ids, labels, frozen=["embedding.weight"], **train)


def test_the_ci_text_models_store_what_fine_tuning_changed_and_load_back_to_the_whole_model(tmp_path, monkeypatch):
    from faithbench.models import zoo

    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path))
    name = "minilm1_rt"
    recipe = RECIPES.get(name)
    assert recipe.frozen == ("word_embeddings.weight",) and "word embeddings frozen" in recipe.description
    start = recipe.architecture()  # the pretrained starting point: its word embeddings are MiniLM's
    pretrained = start.state_dict()["word_embeddings.weight"].clone()
    trained = recipe.architecture()
    with torch.no_grad():
        for k, p in trained.named_parameters():
            if k not in recipe.frozen:
                p.add_(0.5)  # stands for fine-tuning
    zoo._save_checkpoint(name, trained, {"test_accuracy": 0.5})
    saved = torch.load(zoo.checkpoint_path(name), weights_only=True)["state_dict"]
    assert set(saved) == set(trained.state_dict()) - {"word_embeddings.weight"}
    model, info = zoo.build(name)  # loads the checkpoint: no training
    assert info == {"test_accuracy": 0.5}
    for k, v in trained.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    assert torch.equal(model.state_dict()["word_embeddings.weight"], pretrained)
    assert zoo._load_checkpoint(name, recipe.architecture()) is not None
    ckpt = torch.load(zoo.checkpoint_path(name), weights_only=True)
    changed = recipe.architecture()  # another MiniLM package: other embeddings than the model was trained on
    with torch.no_grad():
        changed.word_embeddings.weight[0] += 1
    assert zoo._load_checkpoint(name, changed) is None
    del saved["pooler.weight"]  # a checkpoint that lacks a trained weight is rebuilt, not half loaded
    ckpt["state_dict"] = saved
    ckpt["state_sha256"] = zoo.state_sha256(saved)
    torch.save(ckpt, zoo.checkpoint_path(name))
    assert zoo._load_checkpoint(name, recipe.architecture()) is None


def test_the_best_checkpoint_keeps_the_first_best_validation_score_and_never_stops():
    from faithbench.models.zoo.text_training import BestCheckpoint

    b = BestCheckpoint(accuracy=scripted([0.70, 0.78, 0.75, 0.78, 0.77]))
    model = Scripted()
    for check, steps in enumerate((10, 20, 30, 40, 50), start=1):
        with torch.no_grad():
            model.epoch.fill_(check)
        assert b(model, steps) is False
    assert b.best_state["epoch"].item() == 2  # the tie at check 4 keeps the earlier checkpoint
    rec = b.record()
    assert rec["steps_to_best_validation"] == 20 and rec["kept_check"] == 2
    assert rec["steps_by_check"] == [10, 20, 30, 40, 50]
    assert rec["test_accuracy_by_check"] == pytest.approx([0.69, 0.77, 0.74, 0.77, 0.76])


def test_training_checks_within_epochs_and_warms_the_learning_rate_up_linearly():
    from faithbench.models.zoo.text_training import train_text_classifier

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(8, 2)

        def forward(self, ids, mask):
            return (self.emb(ids) * mask.unsqueeze(-1)).sum(dim=1)

    ids = torch.randint(1, 8, (40, 5))
    labels = torch.randint(0, 2, (40,))
    seen, lrs = [], []
    model = Bag()
    opt_step = torch.optim.AdamW.step

    def record_lr(self, *args, **kwargs):
        lrs.append(self.param_groups[0]["lr"])
        return opt_step(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.optim.AdamW, "step", record_lr)
        run = train_text_classifier(
            model, ids, labels, epochs=2, lr=1.0, batch_size=4, seed=0, loss="ce",
            after_epoch=lambda m, steps: seen.append(steps) or False, warmup=0.2, checks_per_epoch=2,
        )  # fmt: skip
    assert run == 2 and seen == [5, 10, 15, 20]  # 10 batches an epoch, checked at 5 and 10
    assert lrs[:5] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])  # 4 warm-up steps of 20
    assert lrs[5:] == pytest.approx([(20 - s) / 16 for s in range(5, 20)])
    stopped = train_text_classifier(
        Bag(), ids, labels, epochs=3, lr=0.1, batch_size=4, seed=0, loss="ce", after_epoch=lambda m, s: s >= 15,
        checks_per_epoch=2,
    )  # fmt: skip
    assert stopped == 2  # the stop at step 15 ends the second epoch early


def test_the_text_suites_pair_trains_by_one_budget_rule():
    for name in ("minilm_rt", "bcos_minilm_rt"):
        r = RECIPES.get(name)
        assert r.params["epochs"] == 5 and r.params["budget"] == {"warmup": 0.1, "checks_per_epoch": 2}
        assert "5 epochs after a 10 % linear warm-up, keeping the best of 10 validation checkpoints" in r.description
    assert RECIPES.get("minilm_rt").params["lr"] == RECIPES.get("bcos_minilm_rt").params["lr"]


def test_without_a_warm_up_the_schedule_and_the_checks_are_the_ones_recipes_were_built_with():
    from faithbench.models.zoo.text_training import _linear

    assert [_linear(20, 0)(s) for s in range(20)] == [1 - s / 20 for s in range(20)]  # the same floats, bit for bit
    with pytest.raises(ValueError, match="plateau or by a fixed budget, not both"):
        text_zoo.text_recipe("x", epochs=1, lr=1e-4, plateau={"min_delta": 0.0, "patience": 1}, budget={"warmup": 0.1})


class Tiny(nn.Module):
    """A text classifier small enough to train in milliseconds, with dropout (the global random generator's)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.drop, self.head = nn.Embedding(50, 8), nn.Dropout(0.3), nn.Linear(8, 2)

    def forward(self, ids, mask):
        return self.head(self.drop(self.embed(ids)).mean(1))


def weight_score(model, split):
    """A 'held-out accuracy' that is a function of the weights: equal runs give equal records."""
    return float(model.head.weight.detach().sum()) + (0.0 if split == "validation" else 1.0)


@pytest.mark.parametrize("checker", ["best", "plateau"])
def test_a_build_cut_short_resumes_from_its_last_epoch_with_the_bits_of_one_run_through(checker, tmp_path, monkeypatch):
    """Cut in its third epoch (5 steps an epoch, checked twice an epoch for the best checkpoint; the plateau stops
    after epoch 3 or 4), a training resumed from its snapshot ends with the weights and record of one run through."""
    from faithbench.models.zoo import text_training
    from faithbench.models.zoo.text_training import BestCheckpoint

    gen = torch.Generator().manual_seed(3)
    ids, labels = torch.randint(1, 50, (40, 6), generator=gen), torch.randint(0, 2, (40,), generator=gen)
    train = dict(epochs=6, lr=1e-2, batch_size=8, seed=0, loss="bce", pad=0, warmup=0.1, frozen=["embed.weight"])
    train |= {"checks_per_epoch": 2} if checker == "best" else {}

    def fresh():
        torch.manual_seed(0)
        if checker == "best":
            return Tiny(), BestCheckpoint(accuracy=weight_score)
        return Tiny(), Plateau(min_delta=10.0, patience=2, accuracy=weight_score)  # stale from epoch 2: stops at 3

    whole, whole_checker = fresh()
    epochs = text_zoo.train_text_classifier(whole, ids, labels, after_epoch=whole_checker, **train)
    assert epochs == (6 if checker == "best" else 3)

    snapshot = tmp_path / "m.partial"
    step, calls = text_training.training_step, {"n": 0}

    def cut(*args, **kwargs):  # Ctrl-C in the third epoch
        calls["n"] += 1
        if calls["n"] == 13:
            raise KeyboardInterrupt
        step(*args, **kwargs)

    monkeypatch.setattr(text_training, "training_step", cut)
    model, check = fresh()
    with pytest.raises(KeyboardInterrupt):
        text_zoo.train_text_classifier(model, ids, labels, after_epoch=check, snapshot=snapshot, **train)
    assert torch.load(snapshot, weights_only=True)["epochs_done"] == 2
    monkeypatch.setattr(text_training, "training_step", step)
    for _ in range(2):  # resumed; then once more from the snapshot of the finished training (a build that died
        # before its checkpoint was saved): no step is taken again
        model, check = fresh()  # a new process: the starting point again
        assert (
            text_zoo.train_text_classifier(model, ids, labels, after_epoch=check, snapshot=snapshot, **train) == epochs
        )
        pairs = zip(whole.state_dict().values(), model.state_dict().values(), strict=True)
        assert all(torch.equal(a, b) for a, b in pairs)
        assert check.record() == whole_checker.record()
        best = zip(whole_checker.best_state.values(), check.best_state.values(), strict=True)
        assert all(torch.equal(a, b) for a, b in best)


class Wider(Tiny):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 4), nn.Linear(4, 2)


def test_a_snapshot_of_another_training_is_not_used_and_one_that_does_not_fit_is_an_error(tmp_path, capsys):
    ids, labels = torch.randint(1, 50, (16, 6)), torch.randint(0, 2, (16,))
    train = dict(epochs=2, lr=1e-2, batch_size=8, seed=0, loss="ce", pad=0)
    snapshot = tmp_path / "m.partial"
    text_zoo.train_text_classifier(Tiny(), ids, labels, snapshot=snapshot, **(train | {"epochs": 3}))
    assert torch.load(snapshot, weights_only=True)["epochs_done"] == 3
    text_zoo.train_text_classifier(Tiny(), ids, labels, snapshot=snapshot, **train)  # 2 epochs, not 3
    assert "not used (it is of another training" in capsys.readouterr().err
    snapshot.write_bytes(b"not a snapshot")
    text_zoo.train_text_classifier(Tiny(), ids, labels, snapshot=snapshot, **train)
    assert "not used" in capsys.readouterr().err
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)  # other numerics: another training
        text_zoo.train_text_classifier(Tiny(), ids, labels, snapshot=snapshot, **train)
    finally:
        torch.set_num_threads(threads)
    assert "not used (it is of another training" in capsys.readouterr().err
    text_zoo.train_text_classifier(Tiny(), ids, labels, snapshot=snapshot, **train)
    with pytest.raises(RuntimeError, match=r"(?s)does not fit this training .* delete it to build afresh"):
        text_zoo.train_text_classifier(Wider(), ids, labels, snapshot=snapshot, **train)


def test_a_plateau_floor_is_the_majority_rate_or_nothing():
    with pytest.raises(ValueError, match='floor is "majority"'):
        text_zoo.text_recipe("x", epochs=1, lr=1e-3, plateau={"min_delta": 0.01, "patience": 1, "floor": "median"})


def test_the_zoo_gives_a_text_build_its_snapshot_beside_the_checkpoint(tmp_path, monkeypatch):
    from dataclasses import replace

    from faithbench.models import zoo
    from faithbench.models.zoo.training import snapshot_path

    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path))
    seen = []

    def train(model, deps, p):
        seen.append(snapshot_path())
        seen[0].parent.mkdir(parents=True, exist_ok=True)
        seen[0].write_bytes(b"a snapshot")
        return {}

    recipe = replace(RECIPES.get("minilm3_rt"), train=train, held_out=lambda model: {"test_accuracy": 0.5})
    partial = zoo.checkpoint_path("minilm3_rt").with_suffix(".partial")
    zoo._train("minilm3_rt", recipe, Tiny(), {})
    assert seen == [partial] and snapshot_path() is None
    assert zoo.checkpoint_path("minilm3_rt").exists() and not partial.exists()  # gone once the checkpoint is saved
    monkeypatch.setattr(zoo, "_save_checkpoint", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        zoo._train("minilm3_rt", recipe, Tiny(), {})
    assert partial.exists()  # cut short before its checkpoint: kept for the next try
