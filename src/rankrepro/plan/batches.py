"""Training batches: several planned runs trained (and evaluated) by one job, one process.

With ``runtime.runs_per_job`` = N > 1 (config.yaml; the demo) the workflow trains the plan's
runs in batches instead of one job per run: starting Python and importing torch costs more
than a tiny run, and one process trains its batch's runs one after the other
(``python -m rankrepro train-batch``; :mod:`rankrepro.engine.batch`). Each run still gets its own
folder (``results/runs/<id>/``, from its own train job) with what a one-run job writes: the same
seed at its start, the same files, so a run's results do not depend on the batch it fell in.

A batch holds runs that read the same images: the same dataset and the same image caches for
training and for evaluation (a job gets one ``--image-cache`` and one ``--eval-image-cache``).
Within such a group the runs are sorted by id and cut into consecutive batches of at most N;
batch ``k`` of a group whose key's first element is dataset ``d`` is named ``<d>_<k>`` (``_<k>``
counted over the groups of ``d``). The grouping is a pure function of the plan's run ids and their keys: the
same plan gives the same batches.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from rankrepro.messages import ShortMessage

__all__ = ["BatchError", "train_batches"]


class BatchError(ShortMessage, ValueError):
    """An invalid batch size (the message names the config key)."""


def train_batches(run_ids: Iterable[str], runs_per_job: int,
                  key: Callable[[str], tuple[str, Hashable]]) -> dict[str, list[str]]:
    """``{batch name: [run id, ...]}``: the runs grouped by ``key(run_id)`` = (dataset, anything
    hashable that must be equal within a batch), each group sorted by id and cut into batches of
    at most ``runs_per_job``; names ``<dataset>_<k>``, k = 0, 1, ... per dataset, in the order of
    the groups' sorted keys."""
    if isinstance(runs_per_job, bool) or not isinstance(runs_per_job, int) or runs_per_job < 1:
        raise BatchError(f"runtime.runs_per_job must be an integer >= 1, got {runs_per_job!r}")
    groups: dict[tuple, list[str]] = {}
    for rid in sorted(set(run_ids)):
        groups.setdefault(key(rid), []).append(rid)
    batches: dict[str, list[str]] = {}
    count: dict[str, int] = {}
    for group_key in sorted(groups, key=repr):
        dataset, members = group_key[0], groups[group_key]
        for start in range(0, len(members), runs_per_job):
            k = count.get(dataset, 0)
            count[dataset] = k + 1
            batches[f"{dataset}_{k}"] = members[start:start + runs_per_job]
    return batches
