"""NVTX adapter (being written): ranges that nsys 2022.4 and current nsys both record."""

NVTX_DOMAIN = "verlprof"
"""NVTX domain of every range verlprof emits."""

CAPTURE_RANGE = "VERLPROF_CAPTURE"
"""Name of the range that opens an nsys capture window (``-p VERLPROF_CAPTURE@verlprof``)."""
