"""The one error tree of plugin-host.

Every refusal the project makes is an instance of :class:`PluginHostError`. Each subclass
carries the context a reader needs (which tensor, node, layer or input; what was expected;
what was got) as attributes, and its ``str()`` is one line that says all of it. The command
line maps these to exit codes and prints that line; a traceback means a bug, not bad input.

The tree lives in ``abi`` (which depends on nothing else in the project) so that plugin authors
can catch the host's errors without importing the host. ``plugin_host.errors`` re-exports it
and adds the host's own branches.

Where a Python built-in exception means the same thing, the class also derives from it
(``ShapeError`` is a ``ValueError``, ``DTypeError`` a ``TypeError``, ``IndexRangeError`` an
``IndexError``), so generic code that catches those keeps working.
"""

from __future__ import annotations

from typing import Any, Sequence


class PluginHostError(Exception):
    """Base of every error plugin-host raises on purpose."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __str__(self) -> str:
        return self.message


# --- contracts of layers and ops -------------------------------------------------------------


class ContractError(PluginHostError, ValueError):
    """A layer's or op's contract was violated: a bad hyper-parameter, attribute or input."""


class ShapeError(ContractError):
    """A tensor has the wrong shape for where it is used.

    ``where`` names the layer, op, node or tensor; ``expected`` and ``got`` are the shapes (or
    a description of the rule) that disagree.
    """

    def __init__(self, message: str, *, where: str | None = None, expected: Any = None,
                 got: Any = None, **context: Any) -> None:
        super().__init__(message, where=where, expected=expected, got=got, **context)
        self.where, self.expected, self.got = where, expected, got


class DomainError(ContractError):
    """An input is outside the domain where the computation is defined (it would give inf/nan).

    Example: BatchNorm in training mode on an input with one element per channel, where the
    unbiased running-variance correction ``numel / (numel - C)`` divides by zero.
    """


class DTypeError(PluginHostError, TypeError):
    """A tensor has a dtype that is not allowed where it is used."""

    def __init__(self, message: str, *, where: str | None = None, expected: Any = None,
                 got: Any = None, **context: Any) -> None:
        super().__init__(message, where=where, expected=expected, got=got, **context)
        self.where, self.expected, self.got = where, expected, got


class IndexRangeError(PluginHostError, IndexError):
    """Embedding (or gather: ``kind``) indices outside ``0 <= i < vocab_size``.

    ``positions`` are index tuples into the indices tensor, ``values`` the offending values at
    those positions (both truncated to the first few in the message, complete as attributes).
    """

    MAX_LISTED = 8

    def __init__(self, *, where: str, vocab_size: int, positions: Sequence[tuple[int, ...]],
                 values: Sequence[int], kind: str = "embedding") -> None:
        positions = [tuple(int(i) for i in p) for p in positions]
        values = [int(v) for v in values]
        shown = ", ".join(f"{p}={v}" for p, v in zip(positions[: self.MAX_LISTED], values))
        more = len(positions) - self.MAX_LISTED
        suffix = f" (and {more} more)" if more > 0 else ""
        message = (f"{where}: {len(positions)} {kind} index(es) outside [0, {vocab_size}): "
                   f"{shown}{suffix}")
        super().__init__(message, where=where, vocab_size=vocab_size, positions=positions,
                         values=values)
        self.where, self.vocab_size = where, vocab_size
        self.positions, self.values = positions, values


# --- the tensor ABI ----------------------------------------------------------------------------


class ABIError(PluginHostError, ValueError):
    """Tensors handed across the ABI boundary do not match their TensorSpecs.

    ``problems`` lists every mismatch found (all of them, not just the first); the message
    joins them with ``"; "`` after a short header.
    """

    def __init__(self, problems: Sequence[str], *, where: str = "inputs") -> None:
        self.problems = list(problems)
        self.where = where
        header = f"{len(self.problems)} problem(s) with {where}"
        super().__init__(f"{header}: " + "; ".join(self.problems), where=where,
                         problems=self.problems)


class SpecError(ContractError):
    """The ABI description itself is malformed, not a tensor.

    Raised for a bad TensorSpec (name, dims, layout, shape/layout rank disagreement), an unknown
    layout name, a Signature with duplicate names, and a serialized spec dict that has the wrong
    keys or types (artifact manifests are hostile input). An unknown dtype name raises
    :class:`DTypeError` instead, wherever it appears.
    """


class OpError(PluginHostError, ValueError):
    """An op is unknown, has an unknown version, or was given bad attributes."""


# --- graphs and backends -----------------------------------------------------------------------


class GraphError(PluginHostError, ValueError):
    """A model graph is malformed or fails its shape contracts; ``node`` names the culprit."""

    def __init__(self, message: str, *, node: str | None = None, **context: Any) -> None:
        text = f"node {node!r}: {message}" if node else message
        super().__init__(text, node=node, **context)
        self.node = node


class BackendError(PluginHostError):
    """A backend cannot run something it was asked to run (fail closed: no silent fallback)."""


# --- artifacts (the file format) ---------------------------------------------------------------


class ArtifactError(PluginHostError):
    """An artifact file was refused. Every artifact refusal is one of its subclasses.

    ``path`` is the file when known. The format-level subclasses live here; the authority-level
    ones (signatures, trust, rollback, expiry, audits) in ``plugin_host.errors``.
    """

    def __init__(self, message: str, *, path: str | None = None, **context: Any) -> None:
        super().__init__(message, path=path, **context)
        self.path = path

    def __str__(self) -> str:
        """The message, after the file's path when it is known and not named already."""
        path = self.path
        if path and str(path) not in self.message:
            return f"{path}: {self.message}"
        return self.message


class ArtifactFormatError(ArtifactError, ValueError):
    """The bytes are not a well-formed artifact.

    Size caps, the fixed header and its consistency with the file size, canonical msgpack
    (sorted unique keys, minimal encodings, depth and length limits), the signature block,
    padding and trailing bytes, and the manifest schema and its internal cross-references.
    ``where`` names the part (``"header"``, ``"manifest"``, ``"tensors[3]"`` ...).
    """

    def __init__(self, message: str, *, where: str | None = None, path: str | None = None,
                 **context: Any) -> None:
        text = f"{where}: {message}" if where else message
        super().__init__(text, path=path, where=where, **context)
        self.where = where


class TensorHashError(ArtifactError, ValueError):
    """Tensor bytes do not match their SHA-256 in the manifest (or the root digest differs).

    ``tensors`` lists every mismatched tensor name (all of them, not just the first).
    """

    MAX_LISTED = 8

    def __init__(self, tensors: Sequence[str], *, path: str | None = None,
                 root: bool = False) -> None:
        self.tensors = list(tensors)
        if self.tensors:
            shown = ", ".join(self.tensors[: self.MAX_LISTED])
            more = len(self.tensors) - self.MAX_LISTED
            suffix = f" (and {more} more)" if more > 0 else ""
            message = (f"SHA-256 mismatch in {len(self.tensors)} tensor(s): {shown}{suffix}")
        else:
            message = "the root digest does not match the tensor table"
        super().__init__(message, path=path, tensors=self.tensors, root=root)


class IncompatibleArtifactError(ArtifactError):
    """A well-formed, authentic artifact this host cannot run.

    A different host ABI version, an op or op version this host does not know, an op whose
    atomic flag disagrees with this host's op table, or no available target backend.
    """
