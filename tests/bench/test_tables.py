"""The run's CSVs rewritten as units finish: each unit's rows are formatted once, and the files stay the bytes of one
``pd.concat`` + ``to_csv`` of every unit's rows (the rewrites used to cost 97 s of a 12-minute vision run)."""

import pandas as pd

from faithbench.bench.store.tidy import Tables, unit_rows


def _unit(method: str, ids: list[int], value: float, **job) -> dict:
    n = len(ids)
    rec = {
        "values": [value + i for i in range(n)],
        "undefined": [False] * n,
        "sample_ids": ids,
        "params": {"fractions": [0.0, 0.5]},
        "unit": "AUC",
        "higher_is_better": False,
        "explain_time_s": 0.5,
        "metric_time_s": 0.25,
        "curve": [[value, value / 2] for _ in ids],
        "fractions": [0.0, 0.5],
    }
    return {
        "model": "m",
        "method": method,
        "family": "standard",
        "key": method,
        **{"rerun_of": None, "rerun_seed": None, "is_control": False, **job},
        "metrics": {"deletion": rec},
        "provenance": {"seed": 0},
        "method_params": {},
    }


def _one_shot(units: list[dict], kind: str) -> str:
    """What the tables were before: every unit's frames concatenated, then written at once."""
    frames = [f for u in units for f in getattr(unit_rows(u, "s"), kind)]
    return pd.concat(frames).to_csv(index=False)


def test_tables_written_as_units_finish_are_the_bytes_of_one_write(tmp_path):
    a = _unit("gradient", [3, 7], 0.125)
    b = _unit("lime@seed1", [3, 7], 0.5, rerun_of="lime", rerun_seed=1)
    empty = _unit("lrp", [], 0.0)  # no samples on this shard: its columns' dtypes change the whole table's
    tables = Tables(tmp_path)
    for done in ([a], [a, b], [a, b, empty]):
        tables.write(done, "s")
        for kind in ("samples", "curves"):
            assert (tmp_path / f"{kind}.csv").read_text() == _one_shot(done, kind)
    for kind in ("samples", "curves"):  # issue 65: an empty unit made every id a float (15.0), breaking pairing
        ids = pd.read_csv(tmp_path / f"{kind}.csv")["sample_id"]
        assert ids.dtype == "int64" and ",3.0," not in (tmp_path / f"{kind}.csv").read_text()
    results = pd.read_csv(tmp_path / "results.csv")
    assert list(results["method"]) == ["gradient", "lime@seed1", "lrp"]
    assert results["rerun_seed"].tolist()[1] == 1


def test_a_unit_computed_again_is_written_anew_not_from_the_kept_rows(tmp_path):
    tables = Tables(tmp_path)
    tables.write([_unit("gradient", [1, 2], 0.25)], "s")
    again = _unit("gradient", [1, 2], 0.75)  # the same pair, another dict (a rerun of the folder, another worker)
    tables.write([again], "s")
    assert (tmp_path / "curves.csv").read_text() == _one_shot([again], "curves")
    assert pd.read_csv(tmp_path / "results.csv")["mean"].iloc[0] == 1.25


def test_compare_pairs_an_older_files_float_ids_with_integer_ids(tmp_path):
    """Issue 65: ``sample_id`` 15.0 in one run's samples.csv and 15 in the other's paired nothing (ids as strings)."""
    from faithbench.bench.report.compare_inputs import load_samples

    rows = {"model": "m", "method": "g", "rerun_of": "", "metric": "deletion", "value": 0.5}
    for side, ids in (("a", [15.0, 16.0]), ("b", [15, 16])):
        (tmp_path / side).mkdir()
        pd.DataFrame([{**rows, "sample_id": i} for i in ids]).to_csv(tmp_path / side / "samples.csv", index=False)
    a, b = (load_samples(tmp_path / side / "results.csv", side) for side in ("a", "b"))
    assert a["sample_id"].tolist() == b["sample_id"].tolist() == ["15", "16"]
