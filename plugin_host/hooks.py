"""The pluggy markers of plugin-host. Plugins decorate their hook functions with ``hookimpl``."""

import pluggy

PROJECT = "plugin_host"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
