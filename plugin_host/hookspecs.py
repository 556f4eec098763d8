"""Hook specifications: signatures and documentation only.

Every hook is prefixed ``plugin_host_`` and called with keyword arguments, so an implementation
may accept any subset of the documented arguments.
"""

from __future__ import annotations

from .hooks import hookspec

# -------------------------------------------------------------------------------------------------
# Inference hardware
# -------------------------------------------------------------------------------------------------


@hookspec
def plugin_host_add_backends():
    """Return a list of inference backends this plugin provides.

    Implemented by inference-hardware plugins. Each backend follows
    :class:`plugin_host.backend.Backend`: a unique ``name``, the ops (name -> versions) and
    dtypes it supports, and ``prepare(node, consts, types)``. A backend is chosen by name; a
    graph it cannot run is refused at load (no silent fallback). Not ``firstresult``: the
    results of all plugins are collected.
    """


# -------------------------------------------------------------------------------------------------
# Model sources
# -------------------------------------------------------------------------------------------------


@hookspec
def plugin_host_add_model_builders():
    """Return ``{name: builder}``, where ``builder(seed: int) -> Graph`` builds a model graph.

    Implemented by plugins that ship model definitions (the built-in ``plugins.demo_model``
    provides ``"demo"``, the benchmark model). A built graph is only a source: it enters the
    inference chain as a signed artifact. Not ``firstresult``; a duplicate name is an error.
    """
