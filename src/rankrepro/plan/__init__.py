"""The plan: config + setups + table specs + catalog -> runs, tables and datasets, once, without torch.

- :mod:`~rankrepro.plan.schema`: the schemas (``schemas/``, shipped with the package), YAML
  loading, validation errors naming the file and key (:class:`~rankrepro.plan.schema.PlanError`);
- :mod:`~rankrepro.plan.merge`: the layered merge of partial runs, with the origin of each value;
- :mod:`~rankrepro.plan.complete`: a merged run completed with every default, validated, and its id;
- :mod:`~rankrepro.plan.setups`: the paper setups (``setups/<paper>.yaml``) and their ``extends`` chains;
- :mod:`~rankrepro.plan.planned`: names planned but not implemented yet (``planned.yaml``): pending cells;
- :mod:`~rankrepro.plan.planner`: :class:`~rankrepro.plan.planner.Planner`, which resolves runs;
- :mod:`~rankrepro.plan.specs`: the table specs, checked by the schema and their kind;
- :mod:`~rankrepro.plan.build`: :func:`~rankrepro.plan.build.make_plan` (each table planned by its
  kind, :mod:`rankrepro.tables.kinds`), the datasets, the H-GLDv2 block, and writing the plan;
- :mod:`~rankrepro.plan.model`: :class:`~rankrepro.plan.model.Plan` and
  :class:`~rankrepro.plan.model.TablePlan`, the plan as its readers query it;
- :mod:`~rankrepro.plan.batches`: training batches (several runs trained by one job);
- :mod:`~rankrepro.plan.targets`: :class:`~rankrepro.plan.targets.WorkflowTargets`, the workflow's
  paths and arguments (what the rules' input functions return);
- :mod:`~rankrepro.plan.resources`: what each job asks a cluster for (runtime from the cost estimate,
  :mod:`~rankrepro.plan.cost`; memory from the dataset and batch; the config's ``cluster`` caps).
"""
