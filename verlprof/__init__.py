"""verlprof: profiling controller for Ray-based RL trainers."""

__version__ = "0.1.0"
