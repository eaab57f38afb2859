"""What rocprof-sys does inside a Python process, for the stand-in ``fake_rocprof_sys_python.sh``
(no AMD GPU here; the stand-in puts this directory first on PYTHONPATH).

* ``ctypes.CDLL("librocprof-sys-user.so")`` returns a user API that records what verlprof calls:
  ``rocprofsys_user_start_trace``/``stop_trace`` (a window) and ``push_region``/``pop_region``
  (a phase), so the output says which windows the process traced.
* At exit the process writes its output as rocprof-sys names it (ROCm Systems Profiler docs,
  "Understanding the output"): ``<ROCPROFSYS_OUTPUT_PATH>[/<TIMESTAMP>]/<PREFIX><DATA_NAME>
  [-<pid>].<EXT>``, the pid with ``ROCPROFSYS_USE_PID`` on, the timestamp directory with
  ``ROCPROFSYS_TIME_OUTPUT`` on; one set per process covering every window, written only then.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import time

USER_LIBRARY = "librocprof-sys-user.so"
WINDOWS = []  # [{"start_ns", "stop_ns", "regions": [name, ...]}], in order


def _on(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "on", "yes")


class _UserApi:
    """The four calls verlprof makes, recorded."""

    def rocprofsys_user_start_trace(self):
        WINDOWS.append({"start_ns": time.time_ns(), "stop_ns": None, "regions": []})
        return 0

    def rocprofsys_user_stop_trace(self):
        if WINDOWS and WINDOWS[-1]["stop_ns"] is None:
            WINDOWS[-1]["stop_ns"] = time.time_ns()
        return 0

    def rocprofsys_user_push_region(self, name):
        if WINDOWS and WINDOWS[-1]["stop_ns"] is None:
            WINDOWS[-1]["regions"].append(name.decode(errors="replace"))
        return 0

    def rocprofsys_user_pop_region(self, name):
        return 0


class _CDLL(ctypes.CDLL):
    """``ctypes.CDLL`` that answers the rocprof-sys user library with the recorder."""

    def __new__(cls, name, *args, **kwargs):
        if name == USER_LIBRARY:
            return _UserApi()
        return super().__new__(cls)


def _write_output():
    root = os.environ.get("ROCPROFSYS_OUTPUT_PATH")
    if not root:
        return
    if _on("ROCPROFSYS_TIME_OUTPUT"):
        root = os.path.join(root, time.strftime("%Y-%m-%d_%H.%M"))
    os.makedirs(root, exist_ok=True)
    prefix = os.environ.get("ROCPROFSYS_OUTPUT_PREFIX", "")
    suffix = f"-{os.getpid()}" if _on("ROCPROFSYS_USE_PID") else ""
    data = {"pid": os.getpid(), "windows": WINDOWS}
    outputs = {"perfetto-trace": ("proto", b"fake perfetto trace " + json.dumps(data).encode()),
               "wall-clock": ("json", json.dumps(data, indent=1).encode()),
               "metadata": ("json", json.dumps({"pid": os.getpid()}).encode())}
    for data_name, (ext, content) in outputs.items():
        with open(os.path.join(root, f"{prefix}{data_name}{suffix}.{ext}"), "wb") as handle:
            handle.write(content)
    lines = [f"window {i}: {w['start_ns']}..{w['stop_ns']} {' '.join(w['regions'])}"
             for i, w in enumerate(WINDOWS)]
    with open(os.path.join(root, f"{prefix}wall-clock{suffix}.txt"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


if os.environ.get("ROCPROFSYS_OUTPUT_PATH"):
    ctypes.CDLL = _CDLL  # type: ignore[misc]
    atexit.register(_write_output)
