"""A model-layer plugin whose relu is wrong (it is the identity). Tests only: acceptance in the
sandbox must catch it against the artifact's golden outputs."""

from plugin_host.hooks import hookimpl


def _identity_factory(attrs, consts, types, where):
    return lambda x: x.copy()


@hookimpl
def plugin_host_add_kernels(backend):
    return {"relu": _identity_factory}
