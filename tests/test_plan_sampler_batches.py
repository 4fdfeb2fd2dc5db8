"""Batch shapes a sampler cannot build fail the plan naming the file and key (issue 23), not the
training job: m_per_class and class_random need batch_size a multiple of samples_per_class; hierarchical needs
batch_size a multiple of super_classes_per_batch, and each super-class's share of it a multiple
of samples_per_class."""

import textwrap

import pytest

from rankrepro.plan.build import make_plan
from rankrepro.plan.planner import Planner
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import SETUPS_DIR, load_setups

TABLE1 = {"suprank": ["table1"]}  # SOP columns: the hierarchical sampler, batch 256, 4 per class


@pytest.mark.parametrize("overrides, message", [
    ({"sampler": {"batch_size": 33}},
     r"config run_overrides \(cell .*\): sampler.batch_size: sampler 'hierarchical': batch_size 33 is not a "
     r"multiple of super_classes_per_batch 2 \(.*suprank.yaml: suprank_sop\)"),
    ({"sampler": {"batch_size": 36}},
     r"config run_overrides \(cell .*\): sampler.batch_size: sampler 'hierarchical': batch_size 36 over "
     r"super_classes_per_batch 2 gives 18 per super-class, not a multiple of samples_per_class 4 "
     r"\(.*suprank.yaml: suprank_sop\)"),
    ({"sampler": {"samples_per_class": 3}},
     r"suprank.yaml: suprank_sop \(cell .*\): sampler.batch_size: sampler 'hierarchical': batch_size 256 over "
     r"super_classes_per_batch 2 gives 128 per super-class, not a multiple of samples_per_class 3 "
     r"\(config run_overrides\)"),
    ({"sampler": {"name": "m_per_class", "batch_size": 30, "samples_per_class": 4}},
     r"config run_overrides \(cell .*\): sampler.batch_size: sampler 'm_per_class': batch_size 30 is not a "
     r"multiple of samples_per_class 4 \(config run_overrides\)"),
    ({"sampler": {"name": "class_random", "batch_size": 30, "samples_per_class": 4}},
     r"config run_overrides \(cell .*\): sampler.batch_size: sampler 'class_random': batch_size 30 is not a "
     r"multiple of samples_per_class 4 \(config run_overrides\)"),
])
def test_a_batch_size_the_sampler_cannot_split_fails_the_plan(overrides, message):
    with pytest.raises(PlanError, match=message):
        make_plan(TABLE1, overrides)


def test_a_setup_with_a_batch_size_that_is_no_multiple_names_the_setup(tmp_path):
    d = tmp_path / "setups"
    d.mkdir()
    (d / "suprank.yaml").write_text((SETUPS_DIR / "suprank.yaml").read_text())
    (d / "mine.yaml").write_text(textwrap.dedent("""
        mine_cub:
          extends: suprank_sop
          sampler: {name: m_per_class, batch_size: 250, samples_per_class: 4}
        """))
    with pytest.raises(PlanError, match=r"mine.yaml: mine_cub.*: sampler.batch_size: sampler 'm_per_class': "
                                        r"batch_size 250 is not a multiple of samples_per_class 4 "
                                        r"\(.*mine.yaml: mine_cub\)"):
        Planner(setups=load_setups(d)).resolve("mine_cub", [("row", {"loss": {"name": "smooth_ap"}})])


def test_batch_sizes_the_samplers_can_split_plan():
    """up_to_m_per_class fills its last class partly (top-k): no multiple needed."""
    make_plan(TABLE1, {"sampler": {"batch_size": 64, "samples_per_class": 8}})
    make_plan(TABLE1, {"sampler": {"name": "up_to_m_per_class", "batch_size": 30, "samples_per_class": 4}})
