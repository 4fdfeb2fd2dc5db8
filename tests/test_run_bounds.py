"""Sizes are bounded when the plan is made: a zero or negative size (``embed_dim: 0``, a batch of 0, a
temperature of 0) fails planning naming the key, where it used to pass planning and crash (or divide by
zero) in training or evaluation. Run keys are bounded in the run schema; component parameters by their
annotation (``PositiveInt``, ``PositiveFloat``, ``NonNegativeInt``, ``NonNegativeFloat``: rankrepro.registry),
recorded in the catalog."""

import pytest

from rankrepro import catalog
from rankrepro.plan.build import make_plan
from rankrepro.plan.schema import PlanError
from rankrepro.registry import ParameterError, check_parameters

TABLE1 = {"suprank": ["table1"]}


def test_embed_dim_0_fails_planning_naming_the_key():
    with pytest.raises(PlanError, match=r"config run_overrides: model.embed_dim: 0 is less than the minimum of 1"):
        make_plan(TABLE1, {"model": {"embed_dim": 0}})


@pytest.mark.parametrize("overrides, key, bound", [
    ({"loss": {"name": "fast_ap", "num_bins": 0}}, "loss.num_bins", ">= 1"),
    ({"loss": {"name": "smooth_ap", "tau": 0.0}}, "loss.tau", "> 0"),
    ({"loss": {"name": "smooth_ap", "chunk_size": 0}}, "loss.chunk_size", ">= 1"),
    ({"loss": {"name": "smooth_ap", "max_elements": 0}}, "loss.max_elements", ">= 1"),
    ({"loss": {"name": "smooth_recall", "at_k": [1, 0]}}, "loss.at_k", ">= 1"),
    ({"loss": {"name": "sup_ap", "delta": -0.1}}, "loss.delta", ">= 0"),
    ({"loss": {"name": "blackbox_ap", "lambda_val": 0}}, "loss.lambda_val", "> 0"),
    ({"loss": {"name": "multi_similarity", "beta": 0}}, "loss.beta", "> 0"),
    ({"loss": {"name": "calibration", "hierarchy_level": -1}}, "loss.hierarchy_level", ">= 0"),
    ({"loss": {"name": "pnp_dq", "index_blocks": 1}}, "loss.index_blocks", ">= 2"),  # the loss refuses < 2
    ({"loss": {"name": "softbin_ap", "num_bins": 1}}, "loss.num_bins", ">= 2"),
    ({"loss": {"name": "topk_precision", "k": 0}}, "loss.k", ">= 1"),
    ({"loss": {"name": "normalized_softmax", "temperature": 0}}, "loss.temperature", "> 0"),
    ({"model": {"pooling": {"name": "gem", "p": 0}}}, "model.pooling.p", "> 0"),
    ({"schedule": {"name": "cosine", "t_max": 0}}, "schedule.t_max", ">= 1"),
    ({"optimizer": {"weight_decay": -1e-4}}, "optimizer.weight_decay", ">= 0"),
])
def test_a_size_of_zero_fails_planning_naming_the_key(overrides, key, bound):
    with pytest.raises(PlanError, match=rf"config run_overrides \(cell .*\): {key}: .* must be {bound}"):
        make_plan(TABLE1, overrides)


@pytest.mark.parametrize("overrides, message", [
    ({"model": {"pca_images": 0}}, r"model.pca_images: 0 is less than the minimum of 1"),
    ({"sampler": {"batch_size": 0}}, r"sampler.batch_size: 0 is less than the minimum of 1"),
    ({"sampler": {"samples_per_class": -2}}, r"sampler.samples_per_class: -2 is less than the minimum of 1"),
    ({"sampler": {"super_classes_per_batch": 0}}, r"sampler.super_classes_per_batch: 0 is less than the minimum"),
    ({"sampler": {"batches_per_super_tuple": 0}}, r"sampler.batches_per_super_tuple: 0 is less than the minimum"),
    ({"optimizer": {"groups": {"head": {"lr": -1e-5}}}}, r"optimizer.groups.head.lr: -1e-05 is less than the minimum of 0"),
    ({"optimizer": {"groups": {"loss": {"lr": 1.0, "weight_decay": -1}}}}, r"optimizer.groups.loss.weight_decay: -1 is less than the minimum of 0"),
    ({"images": {"train_resize": [0, 4]}}, r"images.train_resize"),
    ({"loss": {"memory": {"size": 0, "warmup_epochs": 0}}}, r"loss.memory"),
])
def test_run_keys_are_bounded_by_the_schema(overrides, message):
    with pytest.raises(PlanError, match=message):
        make_plan(TABLE1, overrides)


def test_a_backbone_learning_rate_of_0_stays_allowed():
    make_plan(TABLE1, {"optimizer": {"groups": {"backbone": {"lr": 0}}}})  # a frozen backbone is meaningful


def test_the_catalog_records_the_bounds_and_the_check_applies_them():
    entry = catalog.load()["loss"]["fast_ap"]
    assert entry["parameters"]["num_bins"] == {"default": 10, "types": ["integer"], "minimum": 1}
    assert catalog.load()["loss"]["smooth_ap"]["parameters"]["tau"]["exclusiveMinimum"] == 0
    assert catalog.load()["loss"]["smooth_recall"]["parameters"]["at_k"]["items"] == {"minimum": 1}
    check_parameters("loss", "fast_ap", entry, {"num_bins": 1}, partial=True)
    with pytest.raises(ParameterError, match=r"loss 'fast_ap': num_bins must be >= 1, got -3"):
        check_parameters("loss", "fast_ap", entry, {"num_bins": -3}, partial=True)


def test_a_setup_with_a_zero_size_fails_when_loaded(tmp_path):
    from rankrepro.plan.setups import SETUPS_DIR, load_setups

    d = tmp_path / "setups"
    d.mkdir()
    (d / "suprank.yaml").write_text((SETUPS_DIR / "suprank.yaml").read_text())
    (d / "mine.yaml").write_text("mine_sop:\n  extends: suprank_sop\n  model: {embed_dim: 0}\n")
    with pytest.raises(PlanError, match=r"mine.yaml: mine_sop.model.embed_dim: 0 is less than the minimum of 1"):
        load_setups(d)


def test_a_choice_annotated_literal_is_an_enum_of_the_catalog_checked_at_plan_time():
    """``init: Literal["imprint", "random"]`` (the face base losses): the catalog records the choices, a value
    outside them fails planning naming the key, and a direct call checks the same list (registry.choices)."""
    from rankrepro.losses.face import Softmax
    from rankrepro.registry import choices

    entry = catalog.load()["loss"]["softmax"]["parameters"]["init"]
    assert entry == {"default": "imprint", "enum": ["imprint", "random"], "types": ["string"]}
    assert choices(Softmax, "init") == ["imprint", "random"]
    with pytest.raises(PlanError, match=r"config run_overrides .*: base_loss.init: loss 'softmax': init must be one of "
                                        r"imprint, random, got 'zeros'"):
        make_plan(TABLE1, {"base_loss": {"name": "softmax", "init": "zeros"}})
    with pytest.raises(TypeError, match="parameter 'embedding_size' is not annotated Literal"):
        choices(Softmax, "embedding_size")
