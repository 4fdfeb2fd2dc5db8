"""Batch samplers. Each yields lists of indices, one list per batch, and is
deterministic given ``(seed, epoch)`` so that a resumed run sees the same batches.

Samplers are registered in :data:`SAMPLERS` (a :class:`rankrepro.registry.Registry`);
a run's ``sampler`` block ``{"name": ..., **parameters}`` is built by
:func:`build_sampler` with the trainer's ``labels`` ([N] or [N, L], finest first) and
``seed``, which are not run parameters.
"""

from __future__ import annotations

import numpy as np

from rankrepro.registry import PositiveInt, Registry

SAMPLERS = Registry("sampler", context=("labels", "seed"))


def indices_by_class(labels) -> list[np.ndarray]:
    """The image indexes of each finest class (labels [N] or [N, L], finest first), classes in sorted order."""
    labels = np.asarray(labels)
    labels = labels[:, 0] if labels.ndim == 2 else labels
    return [np.flatnonzero(labels == c) for c in np.unique(labels)]


class EpochBatchSampler:
    """Batches fixed by ``(seed, epoch)``: subclasses set ``seed`` and ``epoch`` and implement :meth:`_batches`."""

    seed: int
    epoch: int

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        raise NotImplementedError

    def __iter__(self):
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


class IndependentBatchSampler(EpochBatchSampler):
    """An epoch of ``num_batches`` batches drawn independently, each by :meth:`_batch` from the epoch's
    generator ``default_rng([seed, epoch])``: subclasses set ``num_batches`` and implement :meth:`_batch`."""

    num_batches: int

    def _batch(self, rng: np.random.Generator) -> list[int]:
        raise NotImplementedError

    def _batches(self) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        return [self._batch(rng) for _ in range(self.num_batches)]

    def __len__(self) -> int:
        return self.num_batches


@SAMPLERS.register("m_per_class")
class MPerClassBatchSampler(EpochBatchSampler):
    """The m-per-class batches of the Smooth-AP / FastAP / SupRank code.

    Each epoch: shuffle the images inside each class, then shuffle the class order.
    Each pass over the classes builds one batch from the first ``batch_size // m``
    classes that still have at least ``m`` unused images, taking ``m`` from each.
    The epoch ends when a pass cannot fill a batch (left-over images are dropped
    for that epoch); the batches are then shuffled. Classes in a batch are distinct.

    ``reduce_per_class`` (default None: every image): after the shuffle inside each class,
    each class keeps only its first ``reduce_per_class`` images for the epoch -- a fresh
    random subset of at most that many images per class every epoch, drawn from the epoch's
    generator; the others sit the epoch out. This is SupRank's ``MPerClassSampler(...,
    reduce_per_class=8)`` of ``config/dataset/gldv2_hier.yaml`` (``suprank/datasets/samplers/
    m_per_class_sampler.py``, ``reshuffle``: ``np.random.shuffle`` of each class's list, then
    ``[:reduce_per_class]``, redone at every ``set_epoch``; the global numpy RNG there, the
    ``(seed, epoch)`` generator here). With m = 4 and a cap of 8 a class gives at most two
    groups of 4 per epoch, so big classes stop dominating the epoch. It must be at least
    ``samples_per_class`` (a smaller cap could never give a class m images).
    """

    def __init__(self, labels, batch_size: int, samples_per_class: int, reduce_per_class: PositiveInt | None = None,
                 seed: int = 0):
        if batch_size % samples_per_class:
            raise ValueError(f"batch_size {batch_size} is not a multiple of samples_per_class {samples_per_class}")
        if reduce_per_class is not None and reduce_per_class < samples_per_class:
            raise ValueError(f"reduce_per_class {reduce_per_class} is below samples_per_class {samples_per_class}: "
                             "no class could give a batch its images")
        self.m = samples_per_class
        self.classes_per_batch = batch_size // samples_per_class
        self.reduce_per_class = reduce_per_class
        self.by_class = indices_by_class(labels)
        self.seed = seed
        self.epoch = 0
        if sum(len(ix) >= self.m for ix in self.by_class) < self.classes_per_batch:
            raise ValueError(f"fewer than {self.classes_per_batch} classes have {self.m} images: cannot fill one batch")

    def _batches(self) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        pools = [list(rng.permutation(ix)[: self.reduce_per_class]) for ix in self.by_class]
        order = rng.permutation(len(pools))
        batches = []
        while True:
            batch, used = [], 0
            for c in order:
                if len(pools[c]) >= self.m:
                    batch += [int(i) for i in pools[c][: self.m]]
                    del pools[c][: self.m]
                    used += 1
                    if used == self.classes_per_batch:
                        break
            if used < self.classes_per_batch:
                break
            batches.append(batch)
        return [batches[i] for i in rng.permutation(len(batches))]


@SAMPLERS.register("shuffle")
class ShuffleBatchSampler(EpochBatchSampler):
    """Every image once per epoch, in a random order fixed by ``(seed, epoch)``, cut into batches of
    ``batch_size`` (the last one smaller unless ``drop_last``): PyTorch's ``RandomSampler`` + ``BatchSampler``,
    the detection trainer's (mmdetection's VOC loader shuffles the images, in aspect-ratio groups: not kept)."""

    def __init__(self, labels, batch_size: PositiveInt, drop_last: bool = False, seed: int = 0):
        self.n, self.batch_size, self.drop_last = len(labels), batch_size, bool(drop_last)
        self.seed, self.epoch = seed, 0
        if self.n == 0 or (drop_last and self.n < batch_size):
            raise ValueError(f"{self.n} images give no batch of {batch_size}")

    def _batches(self) -> list[list[int]]:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
        stop = self.n - self.n % self.batch_size if self.drop_last else self.n
        return [[int(i) for i in order[a:a + self.batch_size]] for a in range(0, stop, self.batch_size)]


@SAMPLERS.register("class_random")
class ClassRandomBatchSampler(IndependentBatchSampler):
    """PNP's ``class_random`` batches (interestingzhuo/PNPloss ``datasampler/class_random_sampler.py``).

    An epoch is floor(N / B) batches (N training images, B = ``batch_size``), each drawn
    independently: B / m classes (m = ``samples_per_class``) uniformly at random, then m
    images of each drawn class uniformly at random *with replacement* (an image may appear
    twice, and a class smaller than m still gives m), in blocks of m: batch[j*m:(j+1)*m] is
    the j-th drawn class. As the batches are independent, an epoch need not show every image.

    ``replace_classes`` (default True = the official code, one ``random.choice`` over the
    classes per block): the classes of a batch are drawn with replacement, so a class may
    fill two blocks of one batch -- PNP's index-based loss (``pnp_* index_blocks: m``) then
    counts the two blocks as negatives of each other, a label-based loss as positives.
    False: B / m distinct classes per batch (the paper's "randomly sample k classes").
    Deterministic given ``(seed, epoch)`` (the official code draws from Python's global ``random``).
    """

    def __init__(self, labels, batch_size: int, samples_per_class: int, replace_classes: bool = True, seed: int = 0):
        if batch_size % samples_per_class:
            raise ValueError(f"batch_size {batch_size} is not a multiple of samples_per_class {samples_per_class}")
        self.m = samples_per_class
        self.classes_per_batch = batch_size // samples_per_class
        self.replace_classes = bool(replace_classes)
        self.by_class = indices_by_class(labels)
        self.seed = seed
        self.epoch = 0
        if len(labels) < batch_size:
            raise ValueError(f"{len(labels)} images give no batch of {batch_size} (an epoch is floor(N / B) batches)")
        if not self.replace_classes and len(self.by_class) < self.classes_per_batch:
            raise ValueError(f"{len(self.by_class)} classes cannot give {self.classes_per_batch} distinct classes "
                             "per batch (replace_classes: false)")
        self.num_batches = len(labels) // batch_size

    def _batch(self, rng: np.random.Generator) -> list[int]:
        classes = rng.choice(len(self.by_class), size=self.classes_per_batch, replace=self.replace_classes)
        return [int(i) for c in classes for i in rng.choice(self.by_class[c], size=self.m, replace=True)]


@SAMPLERS.register("up_to_m_per_class")
class UpToMPerClassBatchSampler(IndependentBatchSampler):
    """Batches of distinct random classes with up to ``samples_per_class`` images each (top-k precision).

    Paper (Lu et al., ICCV 2019, §4.4): "A training batch contains 64 images from randomly sampled
    classes. For large classes, we randomly sample 11 images for the batch ... For small classes
    with less than 11 images, we sample them all." (the official code's ``OurSampler``, METHOD 8).
    With m = ``samples_per_class`` and B = ``batch_size``, each batch is built independently:

    - classes are drawn uniformly at random without replacement (distinct classes in a batch);
    - each drawn class c adds min(m, |c|, B - filled) of its images, drawn at random without
      replacement, until the batch holds exactly B images.

    So a class of at most m images enters whole whenever it fits, and the last class of a batch
    is truncated to fill exactly B (the paper's batch size; the code's "until the batch is full":
    64 = 5 x 11 + 9). That last class can contribute a single image, a query without a positive,
    which the label-based losses handle (it is only a negative for the others). An epoch is
    floor(N / B) batches, N = training images, as the code's; as the batches are independent an
    epoch need not show every image. Deterministic given ``(seed, epoch)``.
    """

    def __init__(self, labels, batch_size: int, samples_per_class: int, seed: int = 0):
        if batch_size < 1 or samples_per_class < 1:
            raise ValueError(f"batch_size ({batch_size}) and samples_per_class ({samples_per_class}) must be >= 1")
        self.batch_size = batch_size
        self.m = samples_per_class
        self.by_class = indices_by_class(labels)
        self.seed = seed
        self.epoch = 0
        room = sum(min(len(ix), self.m) for ix in self.by_class)
        if room < batch_size:
            raise ValueError(f"{len(self.by_class)} classes with at most {self.m} images each give {room} images: "
                             f"cannot fill one batch of {batch_size}")
        self.num_batches = len(labels) // batch_size

    def _batch(self, rng: np.random.Generator) -> list[int]:
        batch: list[int] = []
        # at most B classes are needed (each adds >= 1 image); fewer when they fill up earlier
        for c in rng.choice(len(self.by_class), size=min(self.batch_size, len(self.by_class)), replace=False):
            pool = self.by_class[c]
            take = min(self.m, len(pool), self.batch_size - len(batch))
            batch += [int(i) for i in rng.choice(pool, size=take, replace=False)]
            if len(batch) == self.batch_size:
                return batch
        # fewer than B classes exist and the draw above used them all: __init__ checked they can fill B
        raise AssertionError("unreachable: the classes cannot fill a batch")


@SAMPLERS.register("hierarchical")
class HierarchicalBatchSampler(EpochBatchSampler):
    """pytorch-metric-learning's HierarchicalSampler (the FastAP super-class batches).

    For every pair of super-classes it builds ``batches_per_super_tuple`` batches,
    each half from one super-class and half from the other, ``samples_per_class``
    images per class. PML draws from the global numpy RNG; we give it a
    ``RandomState(seed, epoch)`` for each epoch and restore the global one after.

    ``super_levels`` (default [1]: the level above the class): the label levels whose
    combination is the super-class -- each distinct tuple of their labels is one super-class.
    [1, 2] on In-shop (levels item, clothing type, gender) gives the gender x type
    super-labels (MEN/Denim and WOMEN/Denim apart: 23 on the real data) of RaMBO (section 5
    "23 superclasses (e.g. MEN/Denim, WOMEN/Dresses)") and of the FastAP code it follows
    (In-shop meta-class ``GENDER_Type``, reference/losses.md 5.2).
    """

    def __init__(self, labels, batch_size: int, samples_per_class: int, batches_per_super_tuple: int = 5,
                 super_classes_per_batch: int = 2, super_levels: list[PositiveInt] = (1,), seed: int = 0):
        labels = np.asarray(labels)
        levels = [int(level) for level in super_levels]
        if not levels or min(levels) < 1 or len(set(levels)) != len(levels):
            raise ValueError(f"super_levels must be distinct levels >= 1 (0 is the class), got {list(super_levels)}")
        if labels.ndim != 2 or labels.shape[1] <= max(levels):
            raise ValueError(f"the hierarchical sampler with super_levels {levels} needs [N, >={max(levels) + 1}] "
                             f"labels (class, then the levels above it), got shape {labels.shape}")
        supers = np.unique(labels[:, levels], axis=0, return_inverse=True)[1].reshape(-1)
        self.super_levels = levels
        self.kwargs = dict(labels=np.stack([labels[:, 0], supers], axis=1), batch_size=batch_size,
                           samples_per_class=samples_per_class, batches_per_super_tuple=batches_per_super_tuple,
                           super_classes_per_batch=super_classes_per_batch, inner_label=0, outer_label=1)
        self.seed = seed
        self.epoch = 0

    def _batches(self) -> list[list[int]]:
        from pytorch_metric_learning.samplers import HierarchicalSampler as PMLHierarchicalSampler
        from pytorch_metric_learning.utils import common_functions as pml_cf

        saved = pml_cf.NUMPY_RANDOM
        pml_cf.NUMPY_RANDOM = np.random.RandomState([self.seed, self.epoch])
        try:
            sampler = PMLHierarchicalSampler(**self.kwargs)
            return [[int(i) for i in b] for b in sampler.batches]
        finally:
            pml_cf.NUMPY_RANDOM = saved


def build_sampler(block: dict, labels, seed: int):
    """The sampler of a run's ``sampler`` block ``{"name": ..., **parameters}`` over ``labels``.

    Parameters are checked against the sampler's signature (unknown, missing, wrongly
    typed ones raise :class:`rankrepro.registry.ParameterError`, an unknown name
    :class:`rankrepro.registry.UnknownNameError`, both ValueErrors)."""
    return SAMPLERS.build_block(block, context={"labels": labels, "seed": seed})
