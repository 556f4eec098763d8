"""Model-layer plugin code, read before confinement and imported after it.

The worker imports model-layer plugins only once it is confined, so not even their
import-time code runs with root's rights. But once it has dropped to the unprivileged uid, the
ordinary file permissions apply too: a project checked out under a root-only directory (a
``mktemp -d`` folder is mode 0700) cannot be read any more, Landlock or not. So the worker
reads the plugins' source files while it is still root -- reading runs no plugin code -- and
serves them to the import system from memory afterwards (:class:`SourceFinder`). Landlock
still allows the same trees read-only, so nothing else changes.

Only ``.py`` sources are served (compiled in the worker, never from cached bytecode), with
their real file names for tracebacks; a plugin that needs other files must ship them inside
its package and read them through the read paths the policy grants. The amount read is capped.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from types import ModuleType

__all__ = ["SourceLimitError", "collect_sources", "SourceFinder", "install", "MAX_FILES",
           "MAX_BYTES"]

MAX_FILES = 4096
MAX_BYTES = 64 * 2**20

#: module name -> (file name, source bytes or None for a namespace package, is a package)
Sources = dict[str, tuple[str, "bytes | None", bool]]


class SourceLimitError(ImportError):
    """A plugin's tree holds more source than the worker reads in advance."""


def collect_sources(module_names: list[str], *, max_files: int = MAX_FILES,
                    max_bytes: int = MAX_BYTES) -> Sources:
    """Every ``.py`` file of the top-level package (or the module file) of each name.

    Found through the import system without running any code (``importlib.util.find_spec``
    on the top-level name only). Top-level names already imported keep their module; their
    not-yet-imported submodules are still collected.
    """
    sources: Sources = {}
    budget = [max_files, max_bytes]

    def read(path: str) -> bytes:
        with open(path, "rb") as f:
            data = f.read(budget[1] + 1)
        budget[0] -= 1
        budget[1] -= len(data)
        if budget[0] < 0 or budget[1] < 0:
            raise SourceLimitError(f"plugin sources exceed {max_files} files or {max_bytes} "
                                   f"bytes (at {path})")
        return data

    for top in dict.fromkeys(name.split(".")[0] for name in module_names):
        spec = importlib.util.find_spec(top)
        if spec is None:
            continue
        locations = list(spec.submodule_search_locations or [])
        if not locations:
            if spec.origin and spec.origin.endswith(".py"):
                sources[top] = (spec.origin, read(spec.origin), False)
            continue
        for location in locations:
            _walk(location, top, sources, read)
    return sources


def _walk(directory: str, package: str, sources: Sources, read) -> None:
    init = os.path.join(directory, "__init__.py")
    if package not in sources:
        has_init = os.path.isfile(init)
        sources[package] = (init if has_init else directory, read(init) if has_init else None,
                            True)
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.name.startswith((".", "__pycache__")):
            continue
        if entry.is_dir(follow_symlinks=False) and entry.name.isidentifier():
            _walk(entry.path, f"{package}.{entry.name}", sources, read)
        elif (entry.is_file(follow_symlinks=False) and entry.name.endswith(".py")
              and entry.name != "__init__.py" and entry.name[:-3].isidentifier()):
            name = f"{package}.{entry.name[:-3]}"
            sources.setdefault(name, (entry.path, read(entry.path), False))


class SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the collected sources; first on ``sys.meta_path`` in the confined worker."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    def find_spec(self, fullname, path=None, target=None):
        entry = self.sources.get(fullname)
        if entry is None:
            return None
        filename, source, is_package = entry
        spec = importlib.util.spec_from_loader(fullname, self, origin=filename,
                                               is_package=is_package)
        spec.has_location = source is not None
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module: ModuleType) -> None:
        filename, source, _ = self.sources[module.__spec__.name]
        if source is None:  # a namespace package: nothing to run
            return
        module.__file__ = filename
        code = compile(source, filename, "exec", dont_inherit=True)
        exec(code, module.__dict__)


def install(sources: Sources) -> SourceFinder:
    finder = SourceFinder(sources)
    sys.meta_path.insert(0, finder)
    return finder
