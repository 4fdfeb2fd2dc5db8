"""The torch-free vocabulary shared by the planner, the trainer and the readers of results.

``plan/`` (which imports no torch), ``engine/`` (which trains) and ``tables/``, ``tracking`` read the same
names from here, so that neither of the first two imports the other:

- :mod:`~rankrepro.record.selection`: the test curve, the best epoch on the test set and which number a table shows;
- :mod:`~rankrepro.record.runtime`: a job's speed settings (:class:`~rankrepro.record.runtime.TrainRuntime`) and
  its other settings (:class:`~rankrepro.record.runtime.JobSettings`), and their command-line flags;
- :mod:`~rankrepro.record.groups`: the names of the optimizer's parameter groups;
- :mod:`~rankrepro.record.tasks`: the default task and the facts a task declares (what the planner checks).
"""
