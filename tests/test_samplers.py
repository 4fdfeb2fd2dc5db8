"""Batch samplers: the official m-per-class construction (with SupRank's per-class cap), PML's
hierarchical batches (with a super-label made of several levels), the top-k precision paper's
up-to-m-per-class batches and PNP's class_random batches."""

from collections import Counter

import numpy as np
import pytest

from rankrepro.data.samplers import (
    ClassRandomBatchSampler,
    HierarchicalBatchSampler,
    MPerClassBatchSampler,
    UpToMPerClassBatchSampler,
)


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


def test_m_per_class_cap_holds_over_every_epoch_and_changes_the_kept_images():
    """reduce_per_class (SupRank gldv2_hier.yaml): at most that many images of a class in an epoch,
    a fresh random subset each epoch; small classes are unaffected."""
    sizes = [40, 25, 9, 8, 6, 4, 30, 12]
    labels = _labels(sizes)
    sampler = MPerClassBatchSampler(labels, batch_size=8, samples_per_class=4, reduce_per_class=8, seed=0)
    kept = []
    for epoch in range(6):
        sampler.set_epoch(epoch)
        images = [i for b in sampler for i in b]
        assert len(images) == len(set(images))
        per_class = Counter(labels[images])
        assert max(per_class.values()) <= 8
        kept.append(frozenset(i for i in images if labels[i] == 0))
    assert len(set(kept)) > 1  # class 0 (40 images) shows other images in other epochs
    # by hand: capped sizes 8, 8, 8, 8, 6, 4, 8, 8 give 2+2+2+2+1+1+2+2 = 14 groups of 4, so at most
    # 7 batches of 2 classes (uncapped: 10+6+2+2+1+1+7+3 = 32 groups)
    assert len(sampler) <= 7 < len(MPerClassBatchSampler(labels, 8, 4, seed=0))


def test_m_per_class_cap_none_is_the_uncapped_sampler_and_a_cap_below_m_fails():
    labels = _labels([7, 4, 9, 3, 12, 5, 8, 4])
    plain = MPerClassBatchSampler(labels, 8, 4, seed=2)
    for cap in (None, 12):  # a cap at the largest class keeps every image: the same batches
        assert list(MPerClassBatchSampler(labels, 8, 4, reduce_per_class=cap, seed=2)) == list(plain)
    with pytest.raises(ValueError, match="reduce_per_class 3 is below samples_per_class 4"):
        MPerClassBatchSampler(labels, 8, 4, reduce_per_class=3)


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


def test_hierarchical_super_levels_combine_levels_into_one_super_label():
    """super_levels [1, 2]: each distinct (level 1, level 2) pair is a super-class (In-shop's clothing
    type x gender): 3 types and 2 genders present as 5 pairs -> C(5, 2) pairs of super-classes."""
    fine = _labels([4] * 16)  # 16 classes of 4
    kind = np.array([0, 0, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]).repeat(4)   # level 1 (type)
    gender = np.array([0] * 6 + [1] * 10).repeat(4)                                 # level 2
    labels = np.stack([fine, kind, gender], 1)
    pairs = {(k, g) for k, g in zip(kind, gender)}
    assert len(pairs) == 5 and len(set(kind)) == 3
    by_type = HierarchicalBatchSampler(labels, 8, 4, batches_per_super_tuple=1, seed=0)
    by_pair = HierarchicalBatchSampler(labels, 8, 4, batches_per_super_tuple=1, super_levels=[1, 2], seed=0)
    assert len(by_type) == 3 and len(by_pair) == 10  # C(3, 2), C(5, 2)
    for batch in by_pair:
        halves = Counter((kind[i], gender[i]) for i in batch)
        assert len(halves) == 2 and set(halves.values()) == {4}
    default = HierarchicalBatchSampler(labels, 8, 4, batches_per_super_tuple=1, super_levels=[1], seed=0)
    assert list(default) == list(by_type)
    with pytest.raises(ValueError, match=r"needs \[N, >=4\] labels"):
        HierarchicalBatchSampler(labels, 8, 4, super_levels=[3])
    with pytest.raises(ValueError, match="distinct levels >= 1"):
        HierarchicalBatchSampler(labels, 8, 4, super_levels=[0, 1])


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
    assert SAMPLERS.names() == ["class_random", "hierarchical", "m_per_class", "shuffle", "up_to_m_per_class"]


@pytest.mark.parametrize("block, message", [
    ({"name": "m_per_clas", "batch_size": 16, "samples_per_class": 4}, "registered: class_random, hierarchical, m_per_class, shuffle, up_to_m_per_class"),
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
            assert spec.get("types") in (["integer"], ["number"], ["boolean"], ["integer", "null"], ["array"]), \
                (name, parameter)
    assert catalog["hierarchical"]["parameters"]["batches_per_super_tuple"] == {"default": 5, "types": ["integer"]}
    assert catalog["hierarchical"]["parameters"]["super_levels"] == {"default": [1], "types": ["array"],
                                                                      "items": {"minimum": 1}}
    assert catalog["m_per_class"]["parameters"]["reduce_per_class"] == {"default": None, "minimum": 1,
                                                                         "types": ["integer", "null"]}
    assert catalog["class_random"]["parameters"]["replace_classes"] == {"default": True, "types": ["boolean"]}


# ------------------------------------------------------- up to m per class (top-k precision, paper 4.4)

#: classes of 1 to 15 images: small ones (< 11, "we sample them all") and large ones (11 drawn)
SIZES = [1, 2, 3, 5, 8, 10, 11, 12, 15, 4, 7, 13, 2, 9, 14, 6]


def _up_to(sizes=SIZES, batch_size=16, cap=5, seed=0, epoch=0):
    labels = _labels(sizes)
    sampler = UpToMPerClassBatchSampler(labels, batch_size=batch_size, samples_per_class=cap, seed=seed)
    sampler.set_epoch(epoch)
    return labels, sampler, list(sampler)


@pytest.mark.parametrize("batch_size, cap", [(16, 5), (64, 11), (7, 3), (10, 1)])
def test_up_to_m_batches_are_exact_distinct_and_capped(batch_size, cap):
    labels, sampler, batches = _up_to(batch_size=batch_size, cap=cap)
    assert len(batches) == len(sampler) == len(labels) // batch_size  # the code's epoch length
    for batch in batches:
        assert len(batch) == batch_size and len(set(batch)) == batch_size  # exact size, no image twice
        counts = Counter(labels[batch])
        assert max(counts.values()) <= cap
        # classes enter in a random order; every class but the last one drawn adds min(cap, |class|)
        order = list(dict.fromkeys(labels[batch]))
        for c in order[:-1]:
            assert counts[c] == min(cap, SIZES[c])
        assert 1 <= counts[order[-1]] <= min(cap, SIZES[order[-1]])


def test_up_to_m_takes_small_classes_whole_when_they_fit():
    labels, _, batches = _up_to(batch_size=64, cap=11)  # the paper's batch: 64 images, 11 per class at most
    whole = 0
    for batch in batches:
        counts = Counter(labels[batch])
        order = list(dict.fromkeys(labels[batch]))
        for c in order[:-1]:  # the last class drawn may be cut to fill the batch
            if SIZES[c] < 11:
                assert set(batch) >= set(np.flatnonzero(labels == c))  # "we sample them all"
                whole += 1
            else:
                assert counts[c] == 11  # "For large classes, we randomly sample 11 images"
    assert whole > 0


def test_up_to_m_draws_random_images_of_large_classes():
    """A class larger than the cap shows different images across batches."""
    labels, _, batches = _up_to(sizes=[30, 30, 30, 30], batch_size=20, cap=5)
    seen = Counter(i for b in batches for i in b if labels[i] == 0)
    assert len(seen) > 5


def test_up_to_m_is_deterministic_per_seed_and_epoch():
    assert _up_to(seed=4, epoch=2)[2] == _up_to(seed=4, epoch=2)[2]
    assert _up_to(seed=4, epoch=2)[2] != _up_to(seed=4, epoch=3)[2]
    assert _up_to(seed=4, epoch=2)[2] != _up_to(seed=5, epoch=2)[2]


def test_up_to_m_reaches_every_class():
    """Classes are drawn uniformly: over a few epochs every class, the 1-image one included, appears."""
    labels = _labels(SIZES)
    sampler = UpToMPerClassBatchSampler(labels, batch_size=16, samples_per_class=5, seed=0)
    seen = set()
    for epoch in range(5):
        sampler.set_epoch(epoch)
        seen |= {int(labels[i]) for b in sampler for i in b}
    assert seen == set(range(len(SIZES)))


def test_up_to_m_takes_two_dimensional_labels_and_the_demo_batch():
    """The finest column of [N, L] labels; the demo's {batch_size: 8, samples_per_class: 2} on 4 classes of 2."""
    fine = _labels([2, 2, 2, 2])
    labels = np.stack([fine, fine // 2], 1)
    from rankrepro.data.samplers import build_sampler

    sampler = build_sampler({"name": "up_to_m_per_class", "batch_size": 8, "samples_per_class": 2}, labels, seed=0)
    assert isinstance(sampler, UpToMPerClassBatchSampler)
    assert [sorted(b) for b in sampler] == [list(range(8))]


def test_up_to_m_rejects_impossible_configs():
    with pytest.raises(ValueError, match="2 classes with at most 4 images each give 6 images: cannot fill one batch of 8"):
        UpToMPerClassBatchSampler(_labels([4, 2]), 8, 4)
    with pytest.raises(ValueError, match="must be >= 1"):
        UpToMPerClassBatchSampler(_labels([4, 4]), 8, 0)


# ------------------------------------------------------------- class_random (PNP's official sampler)


def test_class_random_batches_are_blocks_of_m_images_of_one_class():
    labels = _labels([7, 4, 9, 3, 12, 5, 8, 4, 1])
    sampler = ClassRandomBatchSampler(labels, batch_size=12, samples_per_class=4, seed=0)
    batches = list(sampler)
    assert len(batches) == len(sampler) == len(labels) // 12  # the code's sampler_length
    for batch in batches:
        assert len(batch) == 12
        for j in range(3):
            assert len(set(labels[batch[4 * j:4 * j + 4]])) == 1  # block j: one class


def test_class_random_draws_classes_and_images_with_replacement():
    """Over many batches a class fills two blocks of one batch, an image repeats inside a block,
    and the 1-image class still gives 4; replace_classes false never repeats a class in a batch."""
    labels = _labels([1] + [3] * 7)
    sampler = ClassRandomBatchSampler(labels, batch_size=16, samples_per_class=4, seed=0)
    repeated_class = repeated_image = False
    for epoch in range(20):
        sampler.set_epoch(epoch)
        for batch in sampler:
            blocks = [batch[j:j + 4] for j in range(0, 16, 4)]
            classes = [int(labels[b[0]]) for b in blocks]
            repeated_class |= len(set(classes)) < 4
            repeated_image |= any(len(set(b)) < 4 for b in blocks)
            assert all(b == [0] * 4 for b, c in zip(blocks, classes) if c == 0)
    assert repeated_class and repeated_image
    distinct = ClassRandomBatchSampler(labels, batch_size=16, samples_per_class=4, replace_classes=False, seed=0)
    for epoch in range(20):
        distinct.set_epoch(epoch)
        assert all(len(set(labels[b])) == 4 for b in distinct)


def test_class_random_classes_are_uniform_not_image_weighted():
    """random.choice over the classes: a class of 50 images is drawn as often as one of 2."""
    labels = _labels([50, 2] * 5)
    sampler = ClassRandomBatchSampler(labels, batch_size=20, samples_per_class=2, seed=1)
    counts = Counter()
    for epoch in range(40):
        sampler.set_epoch(epoch)
        counts.update(int(labels[b[0]]) % 2 for batch in sampler for b in [batch[j:j + 2] for j in range(0, 20, 2)])
    big, small = counts[0], counts[1]
    assert abs(big - small) < 0.1 * (big + small)


def test_class_random_is_deterministic_and_checks_its_sizes():
    labels = _labels([6] * 10)
    a, b = ClassRandomBatchSampler(labels, 8, 4, seed=3), ClassRandomBatchSampler(labels, 8, 4, seed=3)
    a.set_epoch(1), b.set_epoch(1)
    assert list(a) == list(b)
    b.set_epoch(2)
    assert list(a) != list(b)
    with pytest.raises(ValueError, match="multiple"):
        ClassRandomBatchSampler(labels, 6, 4)
    with pytest.raises(ValueError, match="no batch of 64"):
        ClassRandomBatchSampler(labels, 64, 4)
    with pytest.raises(ValueError, match="cannot give 4 distinct classes"):
        ClassRandomBatchSampler(_labels([8, 8, 8]), 8, 2, replace_classes=False)
