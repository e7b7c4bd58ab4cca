"""Socket and ready-file paths keyed by the physical device UUID.

The same rules as the Go package core/paths, so that a Python client derives
exactly the paths a daemon uses:

* The socket template comes from WCACHE_SOCKET_TEMPLATE, the ready-file
  template from WCACHE_READY_TEMPLATE; when unset (or empty) they default to
  ``<dir>/{device_uuid}.sock`` and ``<dir>/{device_uuid}.ready.json`` in the
  per-user private directory ``$XDG_RUNTIME_DIR/wcache`` (when XDG_RUNTIME_DIR
  is an absolute path), else ``/tmp/wcache-<euid>``.
* A template is an absolute path containing ``{device_uuid}`` at least once;
  braces appear only as part of a placeholder and ``{device_uuid}`` is the
  only placeholder; no ``..`` and no control characters. Violations raise
  TemplateError naming the variable.
* A device UUID is 1 to 128 ASCII letters, digits or '-' (InvalidUUIDError).
* A socket path is at most 107 bytes (SocketPathTooLongError).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Union

from ._errors import InvalidUUIDError, SocketPathTooLongError, TemplateError

DEVICE_UUID_PLACEHOLDER = "{device_uuid}"
ENV_SOCKET_TEMPLATE = "WCACHE_SOCKET_TEMPLATE"
ENV_READY_TEMPLATE = "WCACHE_READY_TEMPLATE"
MAX_DEVICE_UUID_LEN = 128
MAX_SOCKET_PATH_LEN = 107  # sun_path is 108 bytes including the NUL
DEFAULT_SOCKET_NAME = DEVICE_UUID_PLACEHOLDER + ".sock"
DEFAULT_READY_NAME = DEVICE_UUID_PLACEHOLDER + ".ready.json"
LOCK_SUFFIX = ".lock"

Getenv = Union[Callable[[str], Optional[str]], Mapping[str, str], None]


def _getter(getenv: Getenv) -> Callable[[str], str]:
    if getenv is None:
        return lambda name: os.environ.get(name, "")
    if callable(getenv):
        return lambda name: getenv(name) or ""
    return lambda name: getenv.get(name, "") or ""


def validate_device_uuid(uuid: str) -> str:
    """Return uuid if it is safe to put into a file name, else raise InvalidUUIDError.

    Safe: 1 to 128 characters, each an ASCII letter, digit or '-'.
    """
    if not isinstance(uuid, str):
        raise InvalidUUIDError(repr(uuid), f"not a string but {type(uuid).__name__}")
    if uuid == "":
        raise InvalidUUIDError(uuid, "empty")
    if len(uuid.encode("utf-8")) > MAX_DEVICE_UUID_LEN:
        raise InvalidUUIDError(uuid, f"{len(uuid.encode('utf-8'))} bytes long")
    for i, c in enumerate(uuid):
        if not (("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c == "-"):
            raise InvalidUUIDError(uuid, f"character {i} is {c!r}")
    return uuid


class Template:
    """A parsed path template: literal text around one or more ``{device_uuid}``."""

    __slots__ = ("text", "_parts")

    def __init__(self, source: str, text: str):
        """Parse text; source names the variable or argument it came from (used in errors)."""
        self.text = text
        self._parts = _parse(source, text)

    def expand(self, uuid: str) -> str:
        """Substitute uuid for every placeholder, after validating it (InvalidUUIDError)."""
        validate_device_uuid(uuid)
        return uuid.join(self._parts)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Template({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def _parse(source: str, text: str) -> List[str]:
    if not isinstance(text, str) or text == "":
        raise TemplateError(source, text, "the template is empty")
    for i, c in enumerate(text):
        if ord(c) < 0x20 or ord(c) == 0x7F:
            raise TemplateError(source, text, f"control character {c!r} at position {i}")
    parts: List[str] = []
    unknown: List[str] = []
    lit: List[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "}":
            raise TemplateError(source, text, f"'}}' at position {i} has no matching '{{'")
        if c == "{":
            j = i + 1
            while j < len(text) and text[j] not in "{}":
                j += 1
            if j == len(text) or text[j] == "{":
                raise TemplateError(source, text, f"'{{' at position {i} has no matching '}}'")
            name = text[i:j + 1]
            if name == DEVICE_UUID_PLACEHOLDER:
                parts.append("".join(lit))
                lit = []
            else:
                unknown.append(name)
            i = j + 1
            continue
        lit.append(c)
        i += 1
    parts.append("".join(lit))
    if unknown:
        raise TemplateError(
            source, text,
            f"unknown placeholder(s) {', '.join(unknown)}; the only placeholder is {DEVICE_UUID_PLACEHOLDER}. "
            "Paths must be keyed by the physical GPU: ranks are unique only inside one job, so rank-keyed "
            "paths let two jobs on one host find each other's daemons")
    if len(parts) < 2:
        raise TemplateError(
            source, text,
            f"the template has no {DEVICE_UUID_PLACEHOLDER} placeholder, so every GPU would share one path; "
            "paths must be keyed by the physical device UUID (keying them by anything else, such as a rank, "
            "lets two jobs on one host find each other's daemons)")
    if not text.startswith("/"):
        raise TemplateError(source, text, "the template must be an absolute path (it starts with '/')")
    if ".." in text:
        raise TemplateError(source, text, 'the template must not contain ".."')
    return parts


def parse_template(source: str, text: str) -> Template:
    """Parse a path template (see the module docstring for the rules)."""
    return Template(source, text)


def default_dir(getenv: Getenv = None) -> str:
    """The per-user private directory: $XDG_RUNTIME_DIR/wcache when that
    variable is an absolute path, else /tmp/wcache-<euid>. Not created here."""
    xdg = _getter(getenv)("XDG_RUNTIME_DIR")
    if xdg and xdg.startswith("/"):
        return os.path.join(xdg, "wcache")
    return f"/tmp/wcache-{os.geteuid()}"


def check_socket_path(path: str) -> str:
    """Return path if it fits into sun_path, else raise SocketPathTooLongError."""
    if len(path.encode("utf-8")) > MAX_SOCKET_PATH_LEN:
        raise SocketPathTooLongError(path)
    return path


@dataclass(frozen=True)
class DevicePaths:
    """The discovery files of one device's daemon."""

    device_uuid: str
    socket: str
    ready: str
    lock: str
    # The default private directory the paths lie in, or "" for custom templates.
    default_dir: str


@dataclass(frozen=True)
class Layout:
    """Resolved templates; ``for_device`` turns a UUID into DevicePaths.

    ``dir`` is the default private directory when either template is a default
    one, and "" otherwise.
    """

    socket: Template
    ready: Template
    dir: str

    @classmethod
    def from_env(cls, socket_template: str = "", ready_template: str = "",
                 getenv: Getenv = None) -> "Layout":
        """Resolve each template from its argument when non-empty, else from
        its environment variable when non-empty, else the default.

        Raises TemplateError naming the argument or variable.
        """
        get = _getter(getenv)
        state = {"dir": ""}

        def pick(value: str, arg: str, env: str, default_name: str) -> Template:
            if value:
                return Template(arg, value)
            from_env = get(env)
            if from_env:
                return Template(env, from_env)
            if not state["dir"]:
                state["dir"] = default_dir(getenv)
            d = state["dir"]
            return Template(f"default directory {d} (from XDG_RUNTIME_DIR or uid)",
                            os.path.join(d, default_name))

        sock = pick(socket_template, "socket_template", ENV_SOCKET_TEMPLATE, DEFAULT_SOCKET_NAME)
        ready = pick(ready_template, "ready_template", ENV_READY_TEMPLATE, DEFAULT_READY_NAME)
        if sock.text == ready.text or sock.text == ready.text + LOCK_SUFFIX:
            raise TemplateError("socket and ready templates", sock.text,
                                "the socket path would collide with the ready file or its lock file; "
                                "use distinct templates")
        return cls(socket=sock, ready=ready, dir=state["dir"])

    def for_device(self, uuid: str) -> DevicePaths:
        """Paths of the daemon for device uuid.

        Raises InvalidUUIDError, SocketPathTooLongError. Creates nothing: a
        client only looks.
        """
        sock = self.socket.expand(uuid)
        ready = self.ready.expand(uuid)
        check_socket_path(sock)
        return DevicePaths(device_uuid=uuid, socket=sock, ready=ready, lock=ready + LOCK_SUFFIX,
                           default_dir=self.dir)
