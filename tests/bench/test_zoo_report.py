"""The training-cost comparison of B-cosification Tab. 4, read from the builds' per-epoch held-out logs."""

from faithbench.bench.cli.zoo import TrainingCost, ZooRow, cost_lines, epochs_to_reach, training_cost, training_costs


def row(name, curve, seconds=None):
    return ZooRow(name, "bcos", curve[-1] if curve else 0.9, seconds, 0.0, accuracy_by_epoch=tuple(curve))


def test_epochs_to_reach_by_hand():
    assert epochs_to_reach([0.9, 0.95, 0.97, 0.96], 0.96) == 3
    assert epochs_to_reach([0.9, 0.95], 0.96) is None
    assert epochs_to_reach([0.97], 0.97) == 1  # reaching it exactly counts


def test_a_pair_by_hand():
    bcosified = row("b", [0.95, 0.975, 0.977], 30.0)
    scratch = row("s", [0.8, 0.9, 0.95, 0.96, 0.97, 0.97, 0.973, 0.973], 160.0)
    c = training_cost(bcosified, scratch)
    assert c == TrainingCost("b", "s", 0.973, 2, 3, 8, 20.0, 160.0)
    text = cost_lines([c])
    assert "b reaches s's 97.3% (its final held-out accuracy) after 2 fine-tuning epoch(s) of 3" in text
    assert "4.0x fewer epochs, 8.0x less time" in text


def test_not_reached_and_builds_without_a_log():
    never = training_cost(row("b", [0.5]), row("s", [0.9]))
    assert never.epochs_to_target is None and never.seconds_to_target is None
    assert "does not reach s's 90.0%" in cost_lines([never])
    assert training_cost(row("b", []), row("s", [0.9])) is None


def test_only_the_papers_pairs_present_in_the_zoo_are_compared():
    assert training_costs([row("bcosified_cnn_gap_mnist", [0.9])]) == []
    rows = [row("bcosified_cnn_gap_mnist", [0.9]), row("bcos_gap_cnn_mnist", [0.9]), row("cnn_mnist", [0.9])]
    (c,) = training_costs(rows)
    assert (c.bcosified, c.from_scratch) == ("bcosified_cnn_gap_mnist", "bcos_gap_cnn_mnist")
    assert c.epochs_to_target == 1
