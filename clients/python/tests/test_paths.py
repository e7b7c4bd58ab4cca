"""Path templates, default directory, UUID validation: the rules of core/paths."""

from __future__ import annotations

import os

import pytest

from wcache import InvalidUUIDError, Layout, SocketPathTooLongError, TemplateError, default_dir, parse_template
from wcache._paths import validate_device_uuid


@pytest.mark.parametrize("uuid", ["GPU-edfee158-11c1-52b8-0517-92f30e7fac88", "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f",
                                  "GPU-e044801689257fb4", "mock-0", "A" * 128])
def test_valid_uuids(uuid):
    assert validate_device_uuid(uuid) == uuid


@pytest.mark.parametrize("uuid,reason", [("", "empty"), ("A" * 129, "129 bytes"), ("../x", "'.'"),
                                         ("GPU-1/2", "'/'"), ("a b", "' '"), ("gpu\x00", "'\\x00'"),
                                         ("GPU-é", "'é'"), ("x_y", "'_'")])
def test_invalid_uuids(uuid, reason):
    with pytest.raises(InvalidUUIDError) as e:
        validate_device_uuid(uuid)
    assert reason in str(e.value)
    assert isinstance(e.value, ValueError)


def test_template_expands_every_placeholder():
    t = parse_template("WCACHE_SOCKET_TEMPLATE", "/run/wc/{device_uuid}/{device_uuid}.sock")
    assert t.expand("GPU-1") == "/run/wc/GPU-1/GPU-1.sock"
    with pytest.raises(InvalidUUIDError):
        t.expand("../etc")


@pytest.mark.parametrize("text,fragment", [
    ("", "empty"),
    ("/run/wc/rank.sock", "no {device_uuid} placeholder"),
    ("/run/wc/{rank}-{device_uuid}.sock", "unknown placeholder(s) {rank}"),
    ("/run/wc/{device_uuid.sock", "has no matching '}'"),
    ("/run/wc/{{device_uuid}}.sock", "has no matching '}'"),
    ("/run/wc/device_uuid}.sock", "has no matching '{'"),
    ("run/{device_uuid}.sock", "absolute path"),
    ("/run/../{device_uuid}.sock", '".."'),
    ("/run/\n{device_uuid}.sock", "control character"),
])
def test_bad_templates_are_refused_naming_the_source(text, fragment):
    with pytest.raises(TemplateError) as e:
        parse_template("WCACHE_SOCKET_TEMPLATE", text)
    assert fragment in str(e.value)
    assert str(e.value).startswith("WCACHE_SOCKET_TEMPLATE=")


def test_default_dir_prefers_an_absolute_xdg_runtime_dir():
    assert default_dir({"XDG_RUNTIME_DIR": "/run/user/1000"}) == "/run/user/1000/wcache"
    assert default_dir({"XDG_RUNTIME_DIR": "relative"}) == f"/tmp/wcache-{os.geteuid()}"
    assert default_dir({}) == f"/tmp/wcache-{os.geteuid()}"
    assert default_dir(lambda name: None) == f"/tmp/wcache-{os.geteuid()}"


def test_layout_defaults_and_env_templates():
    layout = Layout.from_env(getenv={"XDG_RUNTIME_DIR": "/run/user/7"})
    p = layout.for_device("GPU-abc")
    assert (p.socket, p.ready, p.lock) == ("/run/user/7/wcache/GPU-abc.sock", "/run/user/7/wcache/GPU-abc.ready.json",
                                           "/run/user/7/wcache/GPU-abc.ready.json.lock")
    assert layout.dir == "/run/user/7/wcache"

    env = {"WCACHE_SOCKET_TEMPLATE": "/srv/{device_uuid}.s", "WCACHE_READY_TEMPLATE": "/srv/{device_uuid}.r"}
    layout = Layout.from_env(getenv=env)
    assert layout.for_device("GPU-abc").socket == "/srv/GPU-abc.s"
    assert layout.dir == ""
    # An argument wins over the environment.
    assert Layout.from_env(socket_template="/x/{device_uuid}", getenv=env).for_device("u").socket == "/x/u"


def test_layout_refuses_colliding_templates_and_long_socket_paths():
    with pytest.raises(TemplateError, match="collide"):
        Layout.from_env(getenv={"WCACHE_SOCKET_TEMPLATE": "/a/{device_uuid}", "WCACHE_READY_TEMPLATE": "/a/{device_uuid}"})
    with pytest.raises(TemplateError, match="WCACHE_READY_TEMPLATE"):
        Layout.from_env(getenv={"WCACHE_READY_TEMPLATE": "/a/ready.json"})
    layout = Layout.from_env(getenv={"WCACHE_SOCKET_TEMPLATE": "/" + "d" * 90 + "/{device_uuid}.sock"})
    with pytest.raises(SocketPathTooLongError, match="107 bytes"):
        layout.for_device("GPU-edfee158-11c1-52b8-0517-92f30e7fac88")
