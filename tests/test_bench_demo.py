"""The demo benchmark's reading of a dry run (the run itself is `python -m rankrepro bench demo`)."""

from rankrepro.bench.demo import job_counts, rule_rows

DRY_RUN = """Building DAG of jobs...
Job stats:
job                          count
-------------------------  -------
all                                1
table                             39
train                              3
train_batch_sop_0                  1
train_batch_sop_1                  1
curves_suprank                     1
total                             46

Reasons:
"""


def test_the_job_stats_are_read_one_row_per_rule():
    jobs = job_counts(DRY_RUN)
    assert jobs == {"all": 1, "table": 39, "train": 3, "train_batch_sop_0": 1, "train_batch_sop_1": 1,
                    "curves_suprank": 1, "total": 46}
    # a family of rules (one per batch, one per paper) is one row (issue 37)
    assert rule_rows(jobs) == {"all": 1, "table": 39, "train": 3, "train_batch": 2, "curves": 1}


def test_the_disk_a_folder_takes_counts_allocated_blocks_of_every_file_below_it(tmp_path):
    from rankrepro.bench.demo import disk_bytes

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "model.pt").write_bytes(b"x" * 10_000)
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "link").symlink_to(tmp_path / "run" / "model.pt")  # not counted twice
    blocks = disk_bytes(tmp_path)
    assert 10_000 <= blocks < 10_000 + 64 * 1024  # whole blocks, at least the bytes written
    assert disk_bytes(tmp_path / "run") == blocks
    assert disk_bytes(tmp_path / "nothing_here") == 0
