"""What the vector workloads share (``search``, ``tune``, ``scale``, and
``crud`` for its data, operations, settings, index build and scoring),
one module per idea:

- ``data``: the documents, queries and exact truth (synthetic or a
  dataset's), their memory, and a dataset's facts made the run's;
- ``params``: the parameters every search workload has, and small naming
  helpers for tasks and settings;
- ``ops``: the upload and search operations (picklable factories);
- ``scoring``: recall and precision of what the clients found;
- ``accounting``: client CPU, the engine's own time, index fields;
- ``tuning``: the recall-target search over one parameter;
- ``run``: ``SearchRun``, the phases of one search run built on the rest,
  and ``VectorWorkload``, what the vector workloads declare alike.

The cut follows what each piece depends on: ``scoring``, ``tuning`` and
``accounting`` need no store or data; ``ops`` needs the store interface
only; ``run`` is the one module that uses them all.
"""
