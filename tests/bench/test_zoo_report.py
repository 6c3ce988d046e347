"""The training-cost comparison of B-cosification Tab. 4, read from the builds' per-epoch held-out logs."""

import pytest

from bench.zoo_report import TrainingCost, cost_lines, epochs_to_reach, training_cost, training_costs


def test_epochs_to_reach_by_hand():
    assert epochs_to_reach([0.9, 0.95, 0.97, 0.96], 0.96) == 3
    assert epochs_to_reach([0.9, 0.95], 0.96) is None
    assert epochs_to_reach([0.97], 0.97) == 1  # reaching it exactly counts


def test_a_pair_by_hand():
    bcosified = {"test_accuracy_by_epoch": [0.95, 0.975, 0.977], "build_seconds": 30.0, "test_accuracy": 0.977}
    scratch = {
        "test_accuracy_by_epoch": [0.8, 0.9, 0.95, 0.96, 0.97, 0.97, 0.973, 0.973],
        "test_accuracy": 0.973,
        "build_seconds": 160.0,
    }
    c = training_cost("b", bcosified, "s", scratch)
    assert c == TrainingCost("b", "s", 0.973, 2, 3, 8, 20.0, 160.0)
    text = cost_lines([c])
    assert "b reaches s's 97.3% (its final held-out accuracy) after 2 fine-tuning epoch(s) of 3" in text
    assert "4.0x fewer epochs, 8.0x less time" in text


def test_not_reached_and_builds_without_a_log():
    never = training_cost(
        "b",
        {"test_accuracy_by_epoch": [0.5], "test_accuracy": 0.5},
        "s",
        {"test_accuracy_by_epoch": [0.9], "test_accuracy": 0.9},
    )
    assert never.epochs_to_target is None and never.seconds_to_target is None
    assert "does not reach s's 90.0%" in cost_lines([never])
    assert (
        training_cost("b", {"test_accuracy": 0.5}, "s", {"test_accuracy_by_epoch": [0.9], "test_accuracy": 0.9}) is None
    )


def test_only_the_papers_pairs_present_in_the_zoo_are_compared():
    log = {"test_accuracy_by_epoch": [0.9], "test_accuracy": 0.9}
    assert training_costs({"bcosified_cnn_gap_mnist": log}) == []
    (c,) = training_costs({"bcosified_cnn_gap_mnist": log, "bcos_gap_cnn_mnist_b2": log, "cnn_mnist": log})
    assert (c.bcosified, c.from_scratch) == ("bcosified_cnn_gap_mnist", "bcos_gap_cnn_mnist_b2")
    assert c.epochs_to_target == pytest.approx(1)
