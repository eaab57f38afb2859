"""verlprof: profiling controller for Ray-based RL trainers."""
