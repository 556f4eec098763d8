"""Hook specifications: signatures and documentation only.

Every hook is prefixed ``plugin_host_`` and called with keyword arguments, so an implementation
may accept any subset of the documented arguments (``def plugin_host_configure(): ...`` is
fine). A plugin declares its kind in the policy (camera, inference-hardware, model-layer,
sink, control); a plugin may implement only the hooks of its kind (``KIND_HOOKS`` in
``plugin_host.plugins``; configure/unconfigure are open to every kind), and a hook name no
spec declares is refused at load. Model-layer and inference-hardware plugins run in the sandbox
worker; the others in the host process.

Each docstring says: the arguments, the return value, who implements it, and its calling
semantics (``firstresult``: the first non-None result wins; ``historic``: a plugin registered
late is called with the past arguments). No hook here is ``firstresult`` or ``historic``.
The README's "Plugin author's guide" documents each under its exact signature; a meta-test
(``tests/plugin_host/test_hooks_meta.py``) keeps the two and the tests in step.
"""

from __future__ import annotations

from .hooks import hookspec

# -------------------------------------------------------------------------------------------------
# Lifecycle
# -------------------------------------------------------------------------------------------------


@hookspec
def plugin_host_configure(config):
    """Set the plugin up; called once per plugin, after all plugins are registered.

    ``config`` is a read-only mapping for *this* plugin only: ``name``, ``kind``, ``kernels``
    (ops it may provide kernels for), ``config`` (its free ``[plugin.config]`` table from the
    policy, read-only) and ``capabilities`` (a mapping from capability name to the object the
    broker made for it, only for what the policy grants; asking it for anything else raises
    ``CapabilityDenied`` and is audited).

    Implemented by any plugin that needs set-up or capabilities (every kind). Called per
    plugin in registration order. Not ``firstresult`` (the return value is ignored); not
    ``historic``. Raising refuses the plugin and stops the host's start.
    """


@hookspec
def plugin_host_unconfigure():
    """Release what configure took; called once per plugin at shutdown.

    Implemented by any plugin that took resources in configure (every kind). Called in reverse
    registration order, even when another plugin's unconfigure failed; afterwards every
    capability handed out is revoked. Not ``firstresult``; not ``historic``.
    """


# -------------------------------------------------------------------------------------------------
# Inference hardware
# -------------------------------------------------------------------------------------------------


@hookspec
def plugin_host_add_backends():
    """Return a list of inference backends this plugin provides.

    Each backend follows :class:`plugin_host.backend.Backend`: a unique ``name``, the ops
    (name -> versions) and dtypes it supports, and ``prepare(node, consts, types)``. A backend
    is chosen by name; a graph it cannot run is refused at load (fail closed: no silent
    fallback to another backend).

    Implemented by inference-hardware plugins (the built-in ``numpy_backend``). Not
    ``firstresult``: the lists of all plugins are collected; two backends with one name is an
    error. Not ``historic``.
    """


@hookspec
def plugin_host_add_kernels(backend):
    """Return ``{op name: factory}``: kernels this plugin provides for the backend ``backend``.

    ``backend`` is the backend's name. A factory has the numpy backend's factory signature
    ``factory(attrs, consts, types, where) -> fn``. The kernel rule (enforced in one place,
    ``plugin_host.sandbox.kernels.accept_kernels``): a kernel for an op is accepted only when
    the op is listed in this plugin's ``kernels`` in the policy (each with an
    ``[[audited_op]]``; without a policy, in the explicit ``kernel_overrides`` of the
    SandboxedExecutor), whether it adds an op the backend lacks or replaces one the backend
    has. Anything else refuses the load with a PluginError naming the plugin and the op; two
    plugins providing one op is an error too.

    Implemented by model-layer plugins; called only inside the sandbox worker. Not
    ``firstresult``: every plugin's mapping is collected. Not ``historic``.
    """


# -------------------------------------------------------------------------------------------------
# Frames and outputs
# -------------------------------------------------------------------------------------------------


@hookspec
def plugin_host_add_cameras(config):
    """Return a list of camera objects (frame sources owning their buffer pools).

    ``config`` is the plugin's own configuration (as in :func:`plugin_host_configure`). Each
    camera has a unique ``name`` and follows :class:`plugin_host.frames.Camera`: it owns its
    frame pool, and consumers take frames through its subscriptions (``recv(timeout)`` returns
    a lease). A camera plugin holding the ``camera.publish`` capability (in
    ``config["capabilities"]``) announces each camera's start and stop on the ``camera`` topic;
    frames themselves never pass through a topic.

    Implemented by camera plugins; runs in the host process. Called once per camera plugin
    with its own config. Not ``firstresult``: every plugin's list is collected; two cameras with
    one name is an error. Not ``historic``.
    """


@hookspec
def plugin_host_add_sinks(config):
    """Return a list of output sinks; each receives every published model output.

    ``config`` is the plugin's own configuration (as in :func:`plugin_host_configure`). A sink
    is a callable ``sink(message)`` taking a :class:`plugin_host.topics.Message` from the
    ``model`` topic (``message.seq``, ``message.time_ns``, ``message.publisher``;
    ``message.data`` is a dict: ``outputs`` maps output names to arrays, beside the frame's
    ``camera``, ``frame_id`` and timestamps, the frame's report, and ``image_geometry``, each
    colour image input's :class:`~plugin_host.frames.geometry.ImageGeometry`, to map a
    detector's boxes back to the frame). It is called synchronously; an exception is
    counted and logged and does not stop delivery to other sinks. A control plugin's sink
    publishes commands through its ``control.publish`` capability.

    Implemented by sink and control plugins; runs in the host process. Called once per plugin
    with its own config. Not ``firstresult``: every plugin's list is collected. Not
    ``historic``.
    """


# -------------------------------------------------------------------------------------------------
# Artifacts
# -------------------------------------------------------------------------------------------------


@hookspec
def plugin_host_verify_artifact(manifest, path):
    """Extra checks on an artifact whose signatures and hashes already verified.

    ``manifest`` is the checked manifest (``abi.artifact.Manifest``), ``path`` the artifact
    file. Raise a :class:`~abi.errors.PluginHostError` subclass to refuse the artifact (any
    other exception refuses it too, as a ``PluginError``); return ``None`` to accept. Cannot
    weaken the built-in verification, which always runs first and cannot be switched off.

    Implemented by host-side plugins (camera, sink and control kinds). Not ``firstresult``:
    every implementation runs, and the first refusal stops the load. Not ``historic``.
    """


# -------------------------------------------------------------------------------------------------
# Model sources
# -------------------------------------------------------------------------------------------------


@hookspec
def plugin_host_add_model_builders():
    """Return ``{name: builder}``, where ``builder(seed: int) -> Graph`` builds a model graph.

    A built graph is only a source for ``plugin-host build``: it enters the inference chain as
    a signed artifact, never directly.

    Implemented by model-layer plugins that ship model definitions (the built-in
    ``demo_model`` provides ``"demo"``, the benchmark model). Not ``firstresult``: every
    plugin's mapping is collected; a duplicate name is an error. Not ``historic``.
    """
