"""Code that runs inside the user's Ray actors: the only verlprof code on the hot path.

:class:`ProfilingWorkerMixin` gives a worker class the controller's RPCs;
:func:`annotate` marks its phase methods; a selected process runs a
:class:`~verlprof.worker.session.ProfileSession`.
"""

from verlprof.worker.annotate import annotate, set_active
from verlprof.worker.identity import node_id, process_identity
from verlprof.worker.mixin import ProfilingWorkerMixin
from verlprof.worker.session import ProfileSession

__all__ = ["ProfileSession", "ProfilingWorkerMixin", "annotate", "node_id", "process_identity",
           "set_active"]
