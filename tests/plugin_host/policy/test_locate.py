"""The line locator: TOML key paths to source lines (tomllib gives no positions)."""

import tomllib

import pytest

from plugin_host.policy import Locator, format_key

TEXT = '''\
# a comment with key = "not a key"
format = 1
title = """
[not.a.table]
fake = 1
"""

[trust]
default_threshold = 2
revoked = [
  "aa",   # comment ]
  'bb',
]
[[trust.key]]
file = "a.pub"
[[trust.key]]
file = 'b.pub'
roles = ["artifact"]

[[plugin]]
name = "one"
[plugin.config]
x.y = 3
"quoted key" = { inner = 1 }

[[plugin]]
name = "two"
capabilities = ["model.publish",
                "camera.publish"]
kind = "sink"
'''


@pytest.fixture(scope="module")
def loc():
    tomllib.loads(TEXT)  # the locator only has to handle valid TOML
    return Locator(TEXT)


@pytest.mark.parametrize("path, line", [
    (("format",), 2),
    (("title",), 3),
    (("trust",), 8),
    (("trust", "default_threshold"), 9),
    (("trust", "revoked"), 10),
    (("trust", "key"), 14),
    (("trust", "key", 0), 14),
    (("trust", "key", 0, "file"), 15),
    (("trust", "key", 1), 16),
    (("trust", "key", 1, "file"), 17),
    (("trust", "key", 1, "roles"), 18),
    (("plugin", 0), 20),
    (("plugin", 0, "name"), 21),
    (("plugin", 0, "config"), 22),
    (("plugin", 0, "config", "x"), 23),
    (("plugin", 0, "config", "x", "y"), 23),
    (("plugin", 0, "config", "quoted key"), 24),
    (("plugin", 1, "name"), 27),
    (("plugin", 1, "capabilities"), 28),
    (("plugin", 1, "kind"), 30),
])
def test_exact_lines(loc, path, line):
    assert loc.line(path) == line


def test_text_inside_values_is_never_a_key(loc):
    assert loc.exact(("not", "a", "table")) is None
    assert loc.exact(("fake",)) is None
    assert loc.exact(("title", "fake")) is None


def test_unrecorded_paths_fall_back_to_the_nearest_ancestor(loc):
    assert loc.line(("plugin", 0, "config", "quoted key", "inner")) == 24  # inline table
    assert loc.line(("plugin", 1, "capabilities", 1)) == 28                # array element
    assert loc.line(("plugin", 1, "missing")) == 26                        # the [[plugin]]
    assert loc.line(("nothing", "here")) == 1


def test_format_key():
    assert format_key(("plugin", 1, "capabilities")) == "plugin[1].capabilities"
    assert format_key(("trust", "thresholds", "my model")) == 'trust.thresholds."my model"'
    assert format_key(()) == ""
