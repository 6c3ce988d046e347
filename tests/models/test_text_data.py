"""Offline text data: counts, deterministic disjoint splits, the vendored file's checksum."""

import pytest

from faithbench.models.data.text import BBC_CLASSES, RT_CLASSES, bbc_news, rotten_tomatoes


@pytest.mark.parametrize(
    ("load", "total", "classes"), [(rotten_tomatoes, 12752, RT_CLASSES), (bbc_news, 2127, BBC_CLASSES)]
)
def test_splits_are_disjoint_deterministic_and_cover_every_unique_text(load, total, classes):
    data = load()
    parts = (data.train, data.val, data.test)
    assert sum(len(p) for p in parts) == total and data.classes == classes
    assert [len(p) for p in parts] == [int(0.8 * total), int(0.1 * total), total - int(0.8 * total) - int(0.1 * total)]
    texts = [t for p in parts for t in p.texts]
    assert len(set(texts)) == total and all(t.strip() == t and t for t in texts)
    assert set(data.train.labels.tolist()) == set(range(len(classes)))
    again = load()
    assert again.test.texts == data.test.texts and again.test.labels.equal(data.test.labels)
    assert load(seed=1).test.texts != data.test.texts


def test_a_corrupt_vendored_file_is_named(tmp_path):
    bad = tmp_path / "rt.csv.bz2"
    bad.write_bytes(b"not the file")
    with pytest.raises(RuntimeError, match="rotten_tomatoes_corpus_full.csv.bz2 is corrupt .*reinstall"):
        rotten_tomatoes(path=bad)
