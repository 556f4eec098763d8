"""plugin-host: the host daemon's package (everything that holds authority).

Import the parts from their modules: ``plugin_host.graph``, ``plugin_host.builder``,
``plugin_host.executor``, ``plugin_host.backend``, ``plugin_host.plugins``, ``plugin_host.errors``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
