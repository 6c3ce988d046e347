"""The Hugging Face text path offline: one line naming what is missing and how to get it, no hang."""

import os

import pytest

from faithbench.errors import UserError
from faithbench.models.data import hf as hf_text


def test_missing_data_set_offline_is_one_line_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    with pytest.raises(UserError) as err:
        hf_text.require("fancyzhx/ag_news", "dataset", "data set 'ag-news':")
    message = str(err.value)
    assert "\n" not in message and "fancyzhx/ag_news" in message
    assert "huggingface-cli download --repo-type dataset fancyzhx/ag_news" in message
    assert str(tmp_path) in message


def test_cached_data_is_read_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    snapshot = tmp_path / "hub" / "datasets--stanfordnlp--imdb" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "README.md").write_text("cached")
    hf_text.require("stanfordnlp/imdb", "dataset", "data set 'imdb':")
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["HF_DATASETS_OFFLINE"] == "1"


def test_loading_a_hugging_face_data_set_without_it_stops_in_one_line(monkeypatch, tmp_path):
    from faithbench.models.data.datasets import DATASETS

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as err:
        DATASETS.get("ag-news").load(None)
    message = str(err.value)
    assert "\n" not in message and ("pip install -e '.[hf]'" in message or "fancyzhx/ag_news" in message)


def test_a_downloaded_data_set_is_read_from_its_hub_snapshot_folder(monkeypatch, tmp_path):
    """Offline, `datasets` finds a repo id only in its own cache; a folder it reads anywhere."""
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    assert hf_text.hub_snapshot("fancyzhx/ag_news") is None
    repo = tmp_path / "hub" / "datasets--fancyzhx--ag_news"
    (repo / "snapshots" / ("a" * 40) / "data").mkdir(parents=True)
    (repo / "snapshots" / ("a" * 40) / "data" / "test-00000-of-00001.parquet").write_bytes(b"stand-in")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    assert hf_text.hub_snapshot("fancyzhx/ag_news") == str(repo / "snapshots" / ("a" * 40))
