"""The environment variables that carry the bridge into verl's processes (kept apart, and
cheap: verl imports the plugin that reads them in every process)."""

ENABLE_ENV = "VERLPROF_VERL_BRIDGE"
"""``1`` in a process's environment: the bridge installs itself when that process imports verl."""
PLUGIN_MODULE = "verlprof.bridges.verl.plugin"
"""The module verl imports in every process (``VERL_USE_EXTERNAL_MODULES``)."""
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
"""verl's own variable: comma-separated modules it imports when it is imported."""
