"""``verlprof trace``: one Perfetto trace of a whole run, every process on the controller's
clock (docs/user_guide.md#one-trace-of-the-whole-job).

``clock`` (alignment records from the manifest), ``nsys_events`` and ``torch_events`` (the
events of one report per backend), ``tracks`` (process tracks and filters), ``writer`` (the
streaming protobuf writer), ``build`` (the run) and ``cli`` (the command).
"""
