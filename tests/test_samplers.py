"""Batch samplers: the official m-per-class construction and PML's hierarchical batches."""

from collections import Counter

import numpy as np
import pytest

from rankrepro.data.samplers import HierarchicalBatchSampler, MPerClassBatchSampler


def _labels(sizes):
    return np.concatenate([np.full(n, c) for c, n in enumerate(sizes)])


def test_m_per_class_batches_have_distinct_classes_m_each():
    labels = _labels([7, 4, 9, 3, 12, 5, 8, 4])
    sampler = MPerClassBatchSampler(labels, batch_size=8, samples_per_class=4, seed=0)
    batches = list(sampler)
    assert len(batches) == len(sampler) > 0
    used = set()
    for batch in batches:
        assert len(batch) == 8
        counts = Counter(labels[batch])
        assert len(counts) == 2 and set(counts.values()) == {4}
        assert not used & set(batch)  # no image twice in an epoch
        used |= set(batch)


def test_m_per_class_epoch_ends_when_a_batch_cannot_be_filled():
    # classes of size 8, 4, 3: pass 1 takes classes (a, b) and pass 2 needs two
    # classes with >= 4 left: only class 0 has 4 left, so the epoch has 1 batch.
    labels = _labels([8, 4, 3])
    batches = list(MPerClassBatchSampler(labels, batch_size=8, samples_per_class=4, seed=1))
    assert all(len(set(labels[b])) == 2 for b in batches)
    assert 1 <= len(batches) <= 2


def test_m_per_class_is_deterministic_per_epoch_and_changes_across_epochs():
    labels = _labels([6] * 20)
    a = MPerClassBatchSampler(labels, 16, 4, seed=3)
    b = MPerClassBatchSampler(labels, 16, 4, seed=3)
    a.set_epoch(2)
    b.set_epoch(2)
    assert list(a) == list(b)
    b.set_epoch(3)
    assert list(a) != list(b)


def test_m_per_class_rejects_impossible_configs():
    with pytest.raises(ValueError, match="multiple"):
        MPerClassBatchSampler(_labels([4, 4]), 6, 4)
    with pytest.raises(ValueError, match="cannot fill"):
        MPerClassBatchSampler(_labels([4, 2]), 8, 4)


def test_hierarchical_batches_mix_two_super_classes():
    rng = np.random.default_rng(0)
    fine = _labels([5] * 24)
    coarse = fine // 6  # 4 super-classes of 6 classes
    labels = np.stack([fine, coarse], 1)[rng.permutation(len(fine))]
    sampler = HierarchicalBatchSampler(labels, batch_size=16, samples_per_class=4, batches_per_super_tuple=2,
                                       seed=0)
    batches = list(sampler)
    assert len(batches) == 6 * 2  # C(4, 2) pairs x 2
    for batch in batches:
        assert len(batch) == 16
        supers = Counter(labels[batch, 1])
        assert len(supers) == 2 and set(supers.values()) == {8}
        assert set(Counter(labels[batch, 0]).values()) == {4}


def test_hierarchical_is_deterministic_and_leaves_global_rng_alone():
    fine = _labels([4] * 12)
    labels = np.stack([fine, fine // 3], 1)
    np.random.seed(123)
    state = np.random.get_state()[1].copy()
    a = HierarchicalBatchSampler(labels, 8, 4, batches_per_super_tuple=1, seed=5)
    b = HierarchicalBatchSampler(labels, 8, 4, batches_per_super_tuple=1, seed=5)
    assert list(a) == list(b)
    b.set_epoch(1)
    assert list(a) != list(b)
    np.testing.assert_array_equal(np.random.get_state()[1], state)


def test_build_sampler_through_the_registry():
    from rankrepro.data.samplers import SAMPLERS, build_sampler

    labels = _labels([6] * 20)
    block = {"name": "m_per_class", "batch_size": 16, "samples_per_class": 4}
    sampler = build_sampler(block, labels, seed=3)
    assert isinstance(sampler, MPerClassBatchSampler)
    assert list(sampler) == list(MPerClassBatchSampler(labels, 16, 4, seed=3))
    hier = build_sampler({"name": "hierarchical", "batch_size": 8, "samples_per_class": 4,
                          "batches_per_super_tuple": 1}, np.stack([labels, labels // 5], 1), 0)
    assert isinstance(hier, HierarchicalBatchSampler) and len(hier) > 0
    assert block == {"name": "m_per_class", "batch_size": 16, "samples_per_class": 4}  # not consumed
    assert SAMPLERS.names() == ["hierarchical", "m_per_class"]


@pytest.mark.parametrize("block, message", [
    ({"name": "m_per_clas", "batch_size": 16, "samples_per_class": 4}, "registered: hierarchical, m_per_class"),
    ({"name": "m_per_class", "batch_size": 16}, "needs 'samples_per_class'"),
    ({"name": "m_per_class", "batch_size": 16.0, "samples_per_class": 4}, "batch_size must be integer"),
    ({"name": "m_per_class", "batch_size": 16, "samples_per_class": 4, "m": 4}, "no parameter 'm'"),
    ({"name": "m_per_class", "batch_size": 16, "samples_per_class": 4, "seed": 1}, "seed"),
])
def test_build_sampler_rejects_bad_blocks(block, message):
    from rankrepro.data.samplers import build_sampler

    with pytest.raises(ValueError, match=message):
        build_sampler(block, _labels([6] * 20), seed=0)


def test_sampler_catalog_is_json_with_simple_types():
    import json

    from rankrepro.data.samplers import SAMPLERS

    catalog = SAMPLERS.catalog()
    assert catalog == json.loads(json.dumps(catalog))
    for name, entry in catalog.items():
        assert not entry["accepts_any"] and not {"labels", "seed"} & set(entry["parameters"])
        for parameter, spec in entry["parameters"].items():
            assert spec.get("types") in (["integer"], ["number"], ["boolean"]), (name, parameter)
    assert catalog["hierarchical"]["parameters"]["batches_per_super_tuple"] == {"default": 5, "types": ["integer"]}
