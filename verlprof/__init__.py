"""verlprof: profiling controller for Ray-based RL trainers."""

import logging

__version__ = "0.1.0"

# a library logs; the application (our CLI, or the user's trainer) decides where it goes
logging.getLogger("verlprof").addHandler(logging.NullHandler())
