"""Line numbers for TOML key paths.

``tomllib`` returns plain dicts with no positions, but every policy error must name its line.
:class:`Locator` scans the source text once and records the line of every table header
(``[a.b]``, ``[[a]]``) and every ``key = value`` statement, resolved to its full key path the way
TOML resolves it: ``[[plugin]]`` opens element ``("plugin", n)``, and a later ``[plugin.config]``
or ``config.rate = 1`` belongs to that last element.

A path is a tuple of str keys and int array indices, e.g. ``("plugin", 1, "capabilities")``.
:meth:`Locator.line` returns the line of the path, or of its nearest recorded ancestor (keys
inside inline tables and elements of arrays are not recorded: they resolve to the line of the
key that holds them), or 1 when nothing matches.

The scanner only needs to be right for text that ``tomllib`` accepted (it runs after parsing);
it tracks strings (basic, literal, multi-line), comments and bracket depth so that text inside
values is never taken for a key.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["KeyPath", "Locator", "format_key"]

KeyPath = tuple  # of str | int

_BARE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def format_key(path: Iterable[str | int]) -> str:
    """``("plugin", 1, "capabilities")`` -> ``"plugin[1].capabilities"``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if part and set(part) <= _BARE else '"' + part.replace('"', '\\"') + '"'
            out += ("." if out else "") + text
    return out


class Locator:
    """Maps key paths of one TOML document to the line (1-based) where each is defined."""

    def __init__(self, text: str) -> None:
        self._lines: dict[KeyPath, int] = {}
        self._scan(text)

    def line(self, path: Iterable[str | int]) -> int:
        """The line of ``path``, else of its nearest recorded ancestor, else 1."""
        path = tuple(path)
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return 1

    def exact(self, path: Iterable[str | int]) -> int | None:
        """The line of exactly ``path``, or None when it is not recorded."""
        return self._lines.get(tuple(path))

    # -- scanning -------------------------------------------------------------------------------

    def _record(self, path: KeyPath, lineno: int) -> None:
        self._lines.setdefault(path, lineno)

    def _resolve(self, keys: list[str], arrays: dict[KeyPath, int]) -> list[str | int]:
        """Insert the current element index after every prefix that is an array of tables."""
        resolved: list[str | int] = []
        for key in keys:
            resolved.append(key)
            count = arrays.get(tuple(resolved))
            if count is not None:
                resolved.append(count - 1)
        return resolved

    def _scan(self, text: str) -> None:
        arrays: dict[KeyPath, int] = {}  # resolved path of an array of tables -> elements seen
        table: list[str | int] = []      # the current table's resolved path
        scanner = _Scanner(text)
        while not scanner.done:
            scanner.skip_blank()
            if scanner.done:
                break
            lineno = scanner.lineno
            if scanner.peek("[["):
                scanner.advance(2)
                keys = scanner.read_key("]]")
                prefix = self._resolve(keys[:-1], arrays)
                full = tuple(prefix + [keys[-1]])
                count = arrays.get(full, 0)
                arrays[full] = count + 1
                table = list(full) + [count]
                self._record(full, lineno)
                self._record(tuple(table), lineno)
                scanner.skip_to_line_end()
            elif scanner.peek("["):
                scanner.advance(1)
                keys = scanner.read_key("]")
                table = self._resolve(keys, arrays)
                self._record(tuple(table), lineno)
                scanner.skip_to_line_end()
            else:
                keys = scanner.read_key("=")
                path = list(table)
                for i, key in enumerate(keys):
                    path.append(key)
                    if i < len(keys) - 1:
                        self._record(tuple(path), lineno)  # a dotted key defines its prefixes
                self._record(tuple(path), lineno)
                scanner.skip_value()


class _Scanner:
    """A cursor over the TOML text that knows strings, comments and brackets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.lineno = 1

    @property
    def done(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def advance(self, n: int) -> None:
        for _ in range(n):
            if self.pos < len(self.text):
                if self.text[self.pos] == "\n":
                    self.lineno += 1
                self.pos += 1

    def skip_blank(self) -> None:
        """Skip whitespace, newlines and comments between statements."""
        while not self.done:
            c = self.text[self.pos]
            if c in " \t\r\n":
                self.advance(1)
            elif c == "#":
                self._skip_comment()
            else:
                return

    def _skip_comment(self) -> None:
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end

    def skip_to_line_end(self) -> None:
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end

    def read_key(self, terminator: str) -> list[str]:
        """A dotted key up to ``terminator`` (consumed): bare or quoted parts."""
        keys: list[str] = []
        while not self.done:
            self._skip_spaces()
            if self.peek(terminator):
                self.advance(len(terminator))
                break
            c = self.text[self.pos]
            if c == '"':
                keys.append(self._basic_string())
            elif c == "'":
                keys.append(self._literal_string())
            elif c == ".":
                self.advance(1)
            elif c in _BARE:
                start = self.pos
                while not self.done and self.text[self.pos] in _BARE:
                    self.pos += 1
                keys.append(self.text[start:self.pos])
            else:  # not valid TOML; tomllib would have refused it
                self.advance(1)
        return keys

    def _skip_spaces(self) -> None:
        while not self.done and self.text[self.pos] in " \t":
            self.pos += 1

    def _basic_string(self) -> str:
        self.advance(1)
        out = []
        while not self.done:
            c = self.text[self.pos]
            if c == "\\":
                nxt = self.text[self.pos + 1:self.pos + 2]
                out.append({"n": "\n", "t": "\t", '"': '"', "\\": "\\"}.get(nxt, nxt))
                self.advance(2)
            elif c == '"':
                self.advance(1)
                break
            else:
                out.append(c)
                self.advance(1)
        return "".join(out)

    def _literal_string(self) -> str:
        self.advance(1)
        end = self.text.find("'", self.pos)
        end = len(self.text) if end < 0 else end
        value = self.text[self.pos:end]
        self.advance(end - self.pos + 1)
        return value

    def skip_value(self) -> None:
        """Skip one value (which may span lines) and the rest of its line."""
        depth = 0
        while not self.done:
            if self.peek('"""') or self.peek("'''"):
                self._skip_multiline(self.text[self.pos:self.pos + 3])
                continue
            c = self.text[self.pos]
            if c == '"':
                self._basic_string()
            elif c == "'":
                self._literal_string()
            elif c == "#":
                self._skip_comment()
            elif c in "[{":
                depth += 1
                self.advance(1)
            elif c in "]}":
                depth -= 1
                self.advance(1)
            elif c == "\n":
                if depth <= 0:
                    return
                self.advance(1)
            else:
                self.advance(1)

    def _skip_multiline(self, quote: str) -> None:
        self.advance(3)
        while not self.done:
            if quote == '"""' and self.text[self.pos] == "\\":
                self.advance(2)
                continue
            if self.peek(quote):
                self.advance(3)
                while self.peek(quote[0]):  # up to two quotes may end the content
                    self.advance(1)
                return
            self.advance(1)
