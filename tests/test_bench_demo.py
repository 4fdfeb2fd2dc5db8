"""The demo benchmark's reading of a dry run (the run itself is `python -m rankrepro bench demo`)."""

from rankrepro.bench.demo import job_counts, rule_rows

DRY_RUN = """Building DAG of jobs...
Job stats:
job                          count
-------------------------  -------
all                                1
table                             39
train_batch_cub_0                  1
train_batch_sop_merge3_0           1
total                             42

Reasons:
"""


def test_the_job_stats_are_read_and_the_batches_share_a_row():
    jobs = job_counts(DRY_RUN)
    assert jobs == {"all": 1, "table": 39, "train_batch_cub_0": 1, "train_batch_sop_merge3_0": 1, "total": 42}
    assert rule_rows(jobs) == {"all": 1, "table": 39, "train_batch_<dataset>_<k>": 2}
