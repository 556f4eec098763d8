"""Policy files: what loads, what it means, and every refusal (file, line and key named)."""

from __future__ import annotations

import pytest

from pathlib import Path

from plugin_host.errors import PolicyError
from plugin_host.policy import (CAPABILITIES, SANDBOX_FORBIDDEN, load_policy, parse_policy)

REPO = Path(__file__).resolve().parents[3]

BASE = '''\
format = 1

[trust]
default_threshold = 1

[[trust.key]]
file = "keys/a.pub"
roles = ["artifact"]

[[artifact]]
name = "demo"
file = "demo.pha"
backend = "numpy"

[[plugin]]
name = "numpy_backend"
kind = "inference-hardware"

[[plugin]]
name = "steering"
kind = "control"
capabilities = ["control.publish", "can.send"]
'''


def refuse(text: str, path: str = "/etc/ph/policy.toml") -> PolicyError:
    """The PolicyError ``text`` is refused with (fails the test if it loads)."""
    with pytest.raises(PolicyError) as info:
        parse_policy(text, path=path, state_dir="/state")
    return info.value


def line_of(text: str, fragment: str) -> int:
    """The 1-based line of the first line containing ``fragment``."""
    for i, line in enumerate(text.splitlines(), 1):
        if fragment in line:
            return i
    raise AssertionError(f"{fragment!r} not in the text")


def load(text, path="/etc/ph/policy.toml"):
    return parse_policy(text, path=path, state_dir="/state")


# --- what loads --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["demo.toml", "device.example.toml"])
def test_shipped_policies_load(name, tmp_path):
    policy = load_policy(REPO / "policies" / name, state_dir=tmp_path)
    assert policy.plugins and policy.artifacts


def test_demo_policy_lists_the_builtins_and_grants_them_nothing(tmp_path):
    policy = load_policy(REPO / "policies" / "demo.toml", state_dir=tmp_path)
    assert [(p.name, p.kind) for p in policy.plugins] == [
        ("numpy_backend", "inference-hardware"), ("demo_model", "model-layer"),
        ("synthetic", "camera")]
    assert policy.granted("numpy_backend") == policy.granted("demo_model") == frozenset()
    assert policy.granted("synthetic") == frozenset({"camera.publish"})  # the daemon's camera
    assert policy.trust.keys[0].file == tmp_path / "demo" / "signing.pub"
    assert policy.artifact("demo").file == tmp_path / "demo" / "demo.pha"
    assert policy.can.interface == "virtual"


def test_device_example_is_strict(tmp_path):
    policy = load_policy(REPO / "policies" / "device.example.toml", state_dir=tmp_path)
    assert policy.sandbox.require == {"seccomp", "landlock", "netns", "no_new_privs", "uid",
                                      "rlimits"}
    assert policy.trust.default_threshold >= 2
    assert policy.audit.fsync
    assert not policy.is_allowed("legacy_debug_console")
    assert policy.audited_op_pairs("numpy") == {("embedding", 1)}


def test_minimal_policy_defaults():
    policy = load("format = 1\n")
    assert policy.plugins == () and policy.artifacts == ()
    assert policy.audit.log == Path("/state/audit.jsonl")
    assert policy.can.interface == "virtual" and policy.panda.provider == "simulated"
    assert policy.panda.allowed_modes == {"silent", "no_output"}
    assert policy.sandbox.require == frozenset()


def test_paths_placeholders_and_relative():
    policy = load(BASE + '[audit]\nlog = "${POLICY_DIR}/logs/a.jsonl"\n')
    assert str(policy.trust.keys[0].file) == "/etc/ph/keys/a.pub"      # relative to the file
    assert str(policy.artifact("demo").file) == "/etc/ph/demo.pha"
    assert str(policy.audit.log) == "/etc/ph/logs/a.jsonl"
    policy = load(BASE.replace('"keys/a.pub"', '"${STATE_DIR}/k.pub"'))
    assert str(policy.trust.keys[0].file) == "/state/k.pub"


def test_default_deny_and_deny_beats_allow():
    text = BASE + '''
[[plugin]]
name = "logger"
kind = "sink"
capabilities = ["model.publish", "camera.publish"]
deny = ["camera.publish"]

[[plugin]]
name = "blocked"
kind = "sink"

[deny]
plugins = ["blocked"]
capabilities = ["can.send"]
'''
    policy = load(text)
    assert policy.granted("steering") == {"control.publish"}          # can.send denied globally
    assert policy.granted("logger") == {"model.publish"}              # its own deny list
    assert policy.granted("numpy_backend") == frozenset()             # nothing listed
    assert policy.granted("unlisted") == frozenset()
    assert not policy.is_allowed("blocked") and not policy.is_allowed("unlisted")
    assert [r.name for r in policy.allowed_plugins()] == ["numpy_backend", "steering", "logger"]
    decision = policy.decide("steering", "can.send")
    assert not decision.granted and "[deny] capabilities" in decision.reason
    assert decision.line == line_of(text, "[deny]")
    assert "default deny" in policy.decide("unlisted", "model.publish").reason


def test_a_sandboxed_plugin_may_deny_itself_anything():
    policy = load(BASE + '[[plugin]]\nname = "nn"\nkind = "model-layer"\n'
                         'deny = ["can.send", "panda.safety", "control.publish"]\n')
    assert policy.granted("nn") == frozenset()


def test_plugin_config_is_free_and_read_only():
    policy = load(BASE + '[plugin.config]\nrate = 20\nnested = { a = [1, 2] }\n')
    config = policy.plugin("steering").config
    assert config["rate"] == 20 and config["nested"]["a"] == (1, 2)
    with pytest.raises(TypeError):
        config["rate"] = 1


def test_trust_store_from_policy(tmp_path):
    from plugin_host.artifacts import generate_key, key_id, write_keypair

    key = generate_key()
    _, pub, _ = write_keypair(tmp_path, key)
    other = "0" * 32
    text = f'''format = 1
[trust]
default_threshold = 1
revoked = ["{other}"]
thresholds = {{ demo = 1 }}
[[trust.key]]
file = "{pub}"
roles = ["artifact"]
[[artifact]]
name = "demo"
file = "demo.pha"
backend = "numpy"
'''
    store = load(text).trust_store()
    assert store.signers == [key_id(key)]
    assert store.is_revoked(other) and store.threshold("demo") == 1


# --- refusals: each names the file, the line and the key -------------------------------------


def only(error: PolicyError):
    assert len(error.problems) == 1, error.problems
    return error.problems[0]


def test_syntax_error_names_the_line():
    text = "format = 1\n[plugin\nname = 1\n"
    p = only(refuse(text))
    assert (p.file, p.line) == ("/etc/ph/policy.toml", 2) and "not valid TOML" in p.message


def test_missing_format():
    p = only(refuse('[can]\ninterface = "virtual"\n'))
    assert "missing required key 'format'" in p.message


def test_unsupported_format():
    p = only(refuse("format = 2\n"))
    assert (p.line, p.key) == (1, "format") and "format 2" in p.message


@pytest.mark.parametrize("extra, key, fragment", [
    ("colour = 1\n", "colour", "colour = 1"),
    ('[trust]\nthreshold = 1\n', "trust.threshold", "threshold = 1"),
    ('[sandbox]\nseccomp = true\n', "sandbox.seccomp", "seccomp = true"),
    ('[plugin.config]\n', None, None),  # a free table: anything goes (control)
])
def test_unknown_keys(extra, key, fragment):
    text = BASE.replace("[trust]\ndefault_threshold = 1\n", "") if extra.startswith("[trust]") \
        else BASE
    text = text + extra if not extra.startswith("colour") else "colour = 1\n" + text
    if key is None:
        load(text)
        return
    p = only(refuse(text))
    assert p.key == key and p.line == line_of(text, fragment) and "unknown key" in p.message


def test_unknown_key_in_a_plugin():
    text = BASE + 'capabilites = ["model.publish"]\n'  # a typo
    p = only(refuse(text))
    assert p.key == "plugin[1].capabilites" and p.line == line_of(text, "capabilites =")


@pytest.mark.parametrize("old, new, key, fragment", [
    ('kind = "control"', "kind = 3", "plugin[1].kind", "must be a string"),
    ('capabilities = ["control.publish", "can.send"]', 'capabilities = "can.send"',
     "plugin[1].capabilities", "must be an array"),
    ('backend = "numpy"', 'backend = "numpy"\nacceptance_required = "yes"',
     "artifact[0].acceptance_required", "must be a boolean"),
    ("default_threshold = 1", "default_threshold = true", "trust.default_threshold",
     "must be an integer"),
    ("default_threshold = 1", "default_threshold = 0", "trust.default_threshold",
     "at least 1"),
])
def test_wrong_types_and_values(old, new, key, fragment):
    text = BASE.replace(old, new)
    p = only(refuse(text))
    assert p.key == key and fragment in p.message
    assert p.line == line_of(text, new.splitlines()[-1])


def test_duplicate_plugin_names():
    text = BASE + '\n[[plugin]]\nname = "steering"\nkind = "sink"\n'
    p = only(refuse(text))
    assert p.key == "plugin[2].name" and "duplicate plugin name 'steering'" in p.message
    assert p.line == len(text.splitlines()) - 1
    first = line_of(text, 'name = "steering"')
    assert f"first at line {first}" in p.message


def test_duplicate_artifact_names():
    text = BASE + '\n[[artifact]]\nname = "demo"\nfile = "b.pha"\nbackend = "numpy"\n'
    assert "duplicate artifact name 'demo'" in only(refuse(text)).message


def test_unknown_kind():
    text = BASE.replace('kind = "control"', 'kind = "controller"')
    p = only(refuse(text))
    assert p.key == "plugin[1].kind" and "unknown plugin kind 'controller'" in p.message


def test_unknown_capability():
    text = BASE.replace('"can.send"]', '"can.receive"]')
    p = only(refuse(text))
    assert p.key == "plugin[1].capabilities" and "unknown capability 'can.receive'" in p.message


def test_capability_listed_twice():
    text = BASE.replace('"can.send"]', '"can.send", "can.send"]')
    assert "listed twice" in only(refuse(text)).message


@pytest.mark.parametrize("kind", ["model-layer", "inference-hardware"])
@pytest.mark.parametrize("capability", sorted(SANDBOX_FORBIDDEN))
def test_sandboxed_kinds_can_never_hold_the_dangerous_capabilities(kind, capability):
    text = BASE + f'\n[[plugin]]\nname = "sneaky"\nkind = "{kind}"\n' \
                  f'capabilities = ["model.publish", "{capability}"]\n'
    p = only(refuse(text))
    assert p.key == "plugin[2].capabilities" and p.line == len(text.splitlines())
    assert f"plugin 'sneaky' is a {kind} plugin and can never hold '{capability}'" in p.message


def test_forbidden_even_when_also_denied():
    text = BASE + ('\n[[plugin]]\nname = "nn"\nkind = "model-layer"\n'
                   'capabilities = ["can.send"]\n[deny]\ncapabilities = ["can.send"]\n')
    assert "can never hold 'can.send'" in only(refuse(text)).message


def test_model_publish_is_allowed_for_a_model_layer_plugin():
    policy = load(BASE + '[[plugin]]\nname = "nn"\nkind = "model-layer"\n'
                         'capabilities = ["model.publish"]\n')
    assert policy.granted("nn") == {"model.publish"}


def test_kernels_need_a_model_layer_plugin_and_an_audit():
    text = BASE.replace('kind = "control"', 'kind = "control"\nkernels = ["embedding"]')
    assert "only a model-layer plugin may provide kernels" in only(refuse(text)).message
    text = BASE + '[[plugin]]\nname = "fast"\nkind = "model-layer"\nkernels = ["embedding"]\n'
    p = only(refuse(text))
    assert p.key == "plugin[2].kernels" and "no [[audited_op]]" in p.message
    audited = text + '[[audited_op]]\nop = "embedding"\nversion = 1\naudit = "AUDIT-1"\n'
    assert load(audited).plugin("fast").kernels == {"embedding"}
    unknown = audited.replace('kernels = ["embedding"]', 'kernels = ["embedding", "warp"]')
    assert "unknown op 'warp'" in only(refuse(unknown)).message


def test_audited_op_must_exist_here():
    base = BASE + '[[audited_op]]\nop = "embedding"\nversion = 1\naudit = "A-1"\n'
    p = only(refuse(base.replace('op = "embedding"', 'op = "scatter_add"')))
    assert p.key == "audited_op[0].op" and "unknown op 'scatter_add'" in p.message
    p = only(refuse(base.replace("version = 1", "version = 9")))
    assert p.key == "audited_op[0].version" and "no version 9" in p.message
    p = only(refuse(base + '[[audited_op]]\nop = "embedding"\nversion = 1\naudit = "A-2"\n'))
    assert "duplicate audit for op embedding v1" in p.message
    p = only(refuse(base.replace('audit = "A-1"\n', "")))
    assert "missing required key 'audit'" in p.message


def test_thresholds_that_can_never_be_met():
    p = only(refuse(BASE.replace("default_threshold = 1", "default_threshold = 2")))
    assert p.key == "trust.default_threshold" and "can never be met" in p.message
    p = only(refuse(BASE + '[trust.thresholds]\ndemo = 3\n'))
    assert p.key == "trust.thresholds.demo" and "threshold 3 for 'demo'" in p.message
    p = only(refuse(BASE + '[trust.thresholds]\nother = 1\n'))
    assert "not an allowed [[artifact]]" in p.message


def test_artifacts_without_any_trusted_key():
    text = BASE.replace('[[trust.key]]\nfile = "keys/a.pub"\nroles = ["artifact"]\n', "")
    assert "no key is trusted" in only(refuse(text)).message


def test_bad_key_ids_roles_and_placeholders():
    p = only(refuse(BASE.replace("default_threshold = 1",
                                 'default_threshold = 1\nrevoked = ["ABC"]')))
    assert p.key == "trust.revoked" and "not a valid key id" in p.message
    p = only(refuse(BASE.replace('roles = ["artifact"]', 'roles = ["root"]')))
    assert p.key == "trust.key[0].roles" and "unknown role 'root'" in p.message
    p = only(refuse(BASE.replace('"keys/a.pub"', '"${HOME}/a.pub"')))
    assert p.key == "trust.key[0].file" and "${HOME}" in p.message


def test_bad_min_version():
    p = only(refuse(BASE.replace('backend = "numpy"', 'backend = "numpy"\nmin_version = "1.2"')))
    assert p.key == "artifact[0].min_version" and "semantic version" in p.message


@pytest.mark.parametrize("extra, key, fragment", [
    ('[sandbox]\nrequire = ["seccomp", "apparmor"]\n', "sandbox.require",
     "unknown protection 'apparmor'"),
    ("[limits]\nmemory_mb = 0\n", "limits.memory_mb", "from 1 to 1099511627776"),
    ("[limits]\nopen_files = 100000000\n", "limits.open_files",
     "from 1 to 1048576, got 100000000"),
    ("[limits]\ncall_timeout_ms = 1e300\n", "limits.call_timeout_ms", "below 1e9, got 1e+300"),
    ("[limits]\ncall_timeout_ms = nan\n", "limits.call_timeout_ms",
     "positive number of milliseconds"),
    ("[limits]\ncall_timeout_ms = -5.0\n", "limits.call_timeout_ms", "positive"),
    ("[limits]\ncpu = -1\n", "limits.cpu", "CPU number (0 or more), 'auto' or 'off'"),
    ('[limits]\ncpu = "fast"\n', "limits.cpu", "CPU number, 'auto' or 'off', got 'fast'"),
    ("[limits]\ncpu = 1.5\n", "limits.cpu", "must be"),
    ('[can]\ninterface = "pcan"\n', "can.interface", "unknown CAN interface 'pcan'"),
    ('[panda]\nprovider = "usb"\n', "panda.provider", "unknown panda provider 'usb'"),
    ('[panda]\nallowed_modes = ["silent", "yolo"]\n', "panda.allowed_modes",
     "unknown safety mode 'yolo'"),
    ('[deny]\ncapabilities = ["root"]\n', "deny.capabilities", "unknown capability 'root'"),
    ('[audit]\nfsync = "yes"\n', "audit.fsync", "must be a boolean"),
])
def test_section_refusals(extra, key, fragment):
    text = BASE + extra
    p = only(refuse(text))
    assert p.key == key and fragment in p.message and p.line == len(text.splitlines())


def test_every_problem_at_once_in_line_order():
    text = BASE.replace('kind = "control"', 'kind = "controller"') + (
        '\n[[plugin]]\nname = "nn"\nkind = "model-layer"\ncapabilities = ["panda.safety"]\n'
        '[limits]\nopen_files = 0\n')
    error = refuse(text)
    assert [p.key for p in error.problems] == ["plugin[1].kind", "plugin[2].capabilities",
                                               "limits.open_files"]
    assert error.problems == sorted(error.problems, key=lambda p: p.line)
    assert str(error).startswith("3 problems in policy /etc/ph/policy.toml: ")
    assert all(str(p).startswith(f"/etc/ph/policy.toml:{p.line}: {p.key}: ")
               for p in error.problems)


def test_unreadable_files(tmp_path):
    with pytest.raises(PolicyError, match="cannot read the policy file"):
        load_policy(tmp_path / "missing.toml")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"format = 1\n# caf\xe9\n")
    with pytest.raises(PolicyError) as info:
        load_policy(bad)
    assert info.value.problems[0].line == 2 and "UTF-8" in str(info.value)
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (1 << 20) + b"\n")
    with pytest.raises(PolicyError, match="larger than"):
        load_policy(big)


def test_all_capabilities_are_known():
    assert set(SANDBOX_FORBIDDEN) <= set(CAPABILITIES)
