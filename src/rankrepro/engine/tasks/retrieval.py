"""The retrieval task (the default): an embedding network trained with a ranking (or any embedding) loss.

**Parts**: the train split of the manifest read through the run's train transform
(:class:`~rankrepro.data.images.ImageDataset`, from ``settings.image_cache`` when given), the run's batch sampler
over its labels, its ``model`` (channels-last on CUDA when the runtime asks; its forward through
``torch.compile`` with ``runtime.compile``, the state dict staying the plain module's) and its ``loss`` with its
``base_loss`` added (:func:`build_loss`).

**Start**: for ``projection_init: pca``, the projection set to the PCA of the training features, and for a base
loss with ``init: imprint`` (:mod:`rankrepro.losses.face`), its class weights imprinted from the network's class
means (:func:`rankrepro.losses.imprint.class_means`), both on a fresh run only (a checkpoint holds the result; neither
consumes global random state); the test curve (:mod:`rankrepro.engine.curve`, ``eval.every``), continued from
the checkpoint's ``curve``; the loader (:class:`~rankrepro.engine.loader.TrainLoader`: workers seeded from the
epoch's seed, so a resumed epoch skips its done batches without loading them).

**Step**: the embeddings under the run's ``amp`` autocast, the loss on them in float32.

**Evaluation**: :func:`rankrepro.engine.evaluate.evaluate`, the run's metrics under the manifest's protocol.
"""

from __future__ import annotations


import numpy as np
import torch

from rankrepro import losses
from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import read_manifest
from rankrepro.data.samplers import build_sampler
from rankrepro.data.transforms import test_transform, train_transform
from rankrepro.device import autocast
from rankrepro.engine.curve import TestCurve
from rankrepro.engine.evaluate import evaluate
from rankrepro.engine.loader import TrainLoader
from rankrepro.engine.tasks import TASKS
from rankrepro.engine.tasks.base import Parts, Task
from rankrepro.losses.imprint import class_means
from rankrepro.losses.registry import data_context
from rankrepro.models import build_model
from rankrepro.models.pca import init_projection_pca
from rankrepro.record.tasks import TaskFacts

__all__ = ["RetrievalTask", "build_loss"]


def build_loss(block: dict, labels: np.ndarray, embed_dim: int, base: dict | None = None):
    """The run's loss (``{"name", "memory", **hyper-parameters}``, every one pinned by the plan), with its
    ``base_loss`` block (``base``; None: none) added, given the training set's sizes as context when a
    signature asks for them: ``num_classes`` (finest level), ``num_classes_per_level`` (finest first) and
    ``embedding_size`` (proxy-based losses)."""
    return losses.build(**block, base_loss=base, context=data_context(labels.max(axis=0) + 1, embed_dim))


@TASKS.register("retrieval")
class RetrievalTask(Task):
    """Retrieval training (module docstring)."""

    facts = TaskFacts(metrics=None, backbones=None, refused={}, throughput_key="{backbone}",
                      bench_dataset="sop")
    evaluator = staticmethod(evaluate)

    def build(self, run, manifest_dir, out_dir, settings, device) -> Parts:
        self.run, self.manifest_dir, self.out_dir = run, manifest_dir, out_dir
        self.settings, self.device = settings, device
        self.manifest = read_manifest(manifest_dir).split(run["train_split"])
        self.dataset = ImageDataset(self.manifest, train_transform(run["images"]), contiguous=True,
                                    cache=settings.image_cache, face=run["images"].get("face"))
        labels = self.dataset.labels.numpy()
        sampler = build_sampler(run["sampler"], labels, seed=run["seed"])
        self.model = build_model(run["model"]).to(device, memory_format=settings.runtime.memory_format(device))
        self.forward = torch.compile(self.model) if settings.runtime.compile else self.model
        self.criterion = build_loss(run["loss"], labels, run["model"]["embed_dim"], run.get("base_loss")).to(device)
        self.sampler = sampler
        return Parts(self.model, self.criterion, sampler)

    def _plain_images(self) -> ImageDataset:
        """The training split on the test transform (no augmentation): what the fresh run's initialisations see."""
        return ImageDataset(self.manifest, test_transform(self.run["images"]), contiguous=True,
                            cache=self.settings.image_cache, face=self.run["images"].get("face"))

    def start(self, state: dict | None) -> None:
        run, settings = self.run, self.settings
        if state is None and getattr(self.model, "projection_init", "random") == "pca":
            init_projection_pca(self.model, self._plain_images(), device=self.device, amp=run["amp"],
                                max_images=self.model.pca_images, seed=run["seed"], num_workers=settings.num_workers)
        base = getattr(self.criterion, "base", None)
        if state is None and getattr(base, "init", None) == "imprint":  # a resumed run restores it with the loss
            finest = self.dataset.labels[:, 0].numpy()  # [N, levels], contiguous: the finest level
            base.imprint(class_means(self.model, self._plain_images(), finest, base.num_classes,
                                     per_class=base.imprint_per_class, seed=run["seed"], device=self.device,
                                     amp=run["amp"], num_workers=settings.num_workers).to(self.device))
        self.curve = TestCurve(run, self.manifest_dir, self.out_dir, self.device,
                               rows=None if state is None else state.get("curve", []),
                               batch_size=settings.eval_batch_size, num_workers=settings.num_workers,
                               image_cache=settings.eval_image_cache)
        self.loader = TrainLoader(self.dataset, self.sampler, num_workers=settings.num_workers, device=self.device,
                                  runtime=settings.runtime, images_cfg=run["images"])

    def batches(self, position, cap):
        return self.loader.epoch(torch.Generator().manual_seed(position.seed), skip=position.batches)

    def step(self, batch):
        images, labels = batch
        with autocast(self.device, self.run["amp"]):
            embeddings = self.forward(images)
        return self.criterion(embeddings.float(), labels), len(images)

    def infer(self, batch) -> int:
        with autocast(self.device, self.run["amp"]):
            self.forward(batch[0])
        return len(batch[0])

    def after_epoch(self, model, epoch: int) -> None:
        self.curve.after_epoch(model, epoch)

    def checkpoint_state(self) -> dict:
        return {"curve": self.curve.rows}

    def close(self) -> None:
        self.loader.close()
