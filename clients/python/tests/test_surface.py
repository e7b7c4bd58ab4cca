"""The public surface of the wcache package: wcache.__all__ is exactly the
list below and each name imports; the names exported before the surface was
cut still resolve from wcache; the engine integrations live in
wcache.engines (the entry points name them there, the first import paths are
the same modules); the package's modules import one another without a
circle. test/archtest (TestPythonSurfaceListed) checks that PUBLIC below
and wcache.__all__ name the same names."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
PACKAGE = os.path.join(SRC, "wcache")
PYPROJECT = os.path.join(os.path.dirname(SRC), "pyproject.toml")

PUBLIC = [
    "CacheConfig", "checkpoint_digest", "attach", "Attachment", "publish", "load_or_publish", "Weights",
    "status", "evict",
    "device_uuid", "device_capability",
    "HandleMappers",
    "WcacheError", "NoDaemonError", "EmptyDaemonError", "DaemonError", "DaemonDeadError", "IncompatibleConfigError",
    "PublishInProgressError", "PublishConflictError", "HoldsWeightsError", "ContentMismatchError",
    "__version__",
]

# The 66 names of wcache.__all__ before its cut (at d1b5b3f), each with the
# module that defines it, or None for a module or a constant.
BEFORE = {
    "Attachment": "_client", "CacheConfig": "_config", "CheckpointError": "_errors", "DaemonBusyError": "_errors",
    "DaemonDeadError": "_errors", "DaemonError": "_errors", "DaemonGone": "_client", "EmptyDaemonError": "_errors",
    "EvictResult": "_client", "ResidentBytes": "_client", "HoldsWeightsError": "_errors",
    "PublishConflictError": "_errors", "PublishInProgressError": "_errors", "PublishResult": "_publish",
    "Weights": "_publish", "load_or_publish": "_publish", "publish": "_publish", "FieldDiff": "_errors",
    "HandleKindsError": "_errors", "HandleMappers": "_mappers", "IncompatibleConfigError": "_errors",
    "MapContext": "_mappers", "UnknownHandleKindError": "_mappers", "is_vendor_kind": "_mappers",
    "validate_handle_kind": "_mappers", "MOCK_CAPABILITY": "_device", "mock_device_uuids": "_device",
    "InvalidConfigError": "_config", "InvalidUUIDError": "_errors", "Layout": "_paths", "NOTICE_DRAINING": None,
    "NoDaemonError": "_errors", "PROTOCOL_VERSION": "_config", "ProtocolError": "_errors",
    "SocketPathTooLongError": "_errors", "TemplateError": "_errors", "TensorSpec": "_manifest",
    "UnsafeSocketError": "_errors", "WcacheError": "_errors", "attach": "_client",
    "canonical_device_uuid": "_device", "checkpoint_digest": "checkpoint", "default_client_name": "_client",
    "default_dir": "_paths", "device_capability": "_device", "device_index_for_uuid": "_device",
    "device_uuid": "_device", "normalize_dtype": "_vocab", "normalize_quantization": "_vocab",
    "parse_template": "_paths", "evict": "_client", "pb": None, "resident_bytes": "_client", "status": "_client",
    "validate_device_uuid": "_paths", "ModelNotCachedError": "_hub", "resolve_model": "_hub", "content": None,
    "ContentMismatchError": "content", "ContentUnknownError": "content", "DigestCache": "content",
    "PolicyRefusedError": "content", "digest_file": "content", "identities_match": "content",
    "prove_content": "content", "__version__": "_version",
}

ENGINES = ["vllm", "sglang", "transformers"]


def test_all_is_the_public_list():
    import wcache

    assert len(wcache.__all__) == len(set(wcache.__all__)), "a name is listed twice"
    assert sorted(wcache.__all__) == sorted(PUBLIC)


@pytest.mark.parametrize("name", PUBLIC)
def test_each_public_name_imports(name):
    import wcache

    ns = {}
    exec(f"from wcache import {name}", ns)  # noqa: S102 - the statement users write
    assert ns[name] is getattr(wcache, name)


def test_star_import_gives_the_public_list():
    ns = {}
    exec("from wcache import *", ns)  # noqa: S102
    assert sorted(k for k in ns if k != "__builtins__") == sorted(PUBLIC)


def test_names_exported_before_still_resolve():
    import wcache

    assert len(BEFORE) == 66
    for name, module in BEFORE.items():
        value = getattr(wcache, name)
        if module is not None:
            assert value is getattr(importlib.import_module("wcache." + module), name), name
    assert wcache.NOTICE_DRAINING == wcache.pb.NOTICE_KIND_DRAINING
    with pytest.raises(AttributeError):
        getattr(wcache, "no_such_name")


def test_private_modules_are_marked():
    """Every module of the package is public only if it is meant to be:
    the package, the engines, the public modules, the old engine paths."""
    public = {"__init__.py", "__main__.py", "checkpoint.py", "content.py", "dtypes.py", "pb.py",
              "vllm.py", "sglang.py", "transformers.py"}
    for name in os.listdir(PACKAGE):
        if name.endswith(".py"):
            assert name in public or name.startswith("_"), f"wcache/{name} is neither public nor _-named"
    engines = {n for n in os.listdir(os.path.join(PACKAGE, "engines")) if n.endswith(".py")}
    assert {e + ".py" for e in ENGINES} | {"__init__.py"} <= engines
    assert all(n in {e + ".py" for e in ENGINES} | {"__init__.py"} or n.startswith("_") for n in engines), engines


def test_entry_points_name_the_engines_package():
    text = open(PYPROJECT).read()
    for group, engine in (("vllm.general_plugins", "vllm"), ("sglang.srt.plugins", "sglang")):
        m = re.search(r'\[project\.entry-points\."' + re.escape(group) + r'"\]\s*\nwcache = "([^"]+)"', text)
        assert m, f"no entry point in group {group}"
        assert m.group(1) == f"wcache.engines.{engine}:register"


@pytest.mark.parametrize("engine", ENGINES)
def test_old_engine_path_is_the_engine_module(engine):
    """wcache.X and wcache.engines.X are one module object. The engine's own
    package is imported by vllm and sglang at import time; their alias is
    checked on a stand-in module of that name when the engine is absent."""
    code = f"""
import sys, types
sys.path.insert(0, {SRC!r})
try:
    import wcache.engines.{engine} as new
except ImportError as exc:
    print("SKIP", exc)
    sys.exit(0)
import wcache.{engine} as old
assert old is new, (old, new)
assert sys.modules["wcache.{engine}"] is new
print("OK")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    if r.stdout.startswith("SKIP"):
        # The shim alone: it must hand the engines module to sys.modules.
        tree = ast.parse(open(os.path.join(PACKAGE, engine + ".py")).read())
        src = ast.unparse(tree)
        assert f"from .engines import {engine} as _engine" in src and "_sys.modules[__name__] = _engine" in src
    else:
        assert r.stdout.strip() == "OK"


def _import_graph():
    mods = {}
    for dirpath, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, SRC)[:-3].replace(os.sep, ".")
                mods[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    graph = {}
    for mod, path in mods.items():
        pkg = mod if path.endswith("__init__.py") else mod.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(open(path).read())):  # function-level imports too
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = pkg.split(".")
                    target = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [target + "." + a.name for a in node.names if target + "." + a.name in mods]
                edges.update(t for t in (subs or [target]) if t in mods and t != mod)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in mods and a.name != mod)
        graph[mod] = edges
    return graph


def _cycle(graph):
    """A cycle of graph as a list of modules, or None."""
    state, stack = {}, []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_no_import_circle():
    graph = _import_graph()
    assert "wcache._device" in graph and "wcache._hip" in graph["wcache._device"], "the graph misses an import"
    assert _cycle(graph) is None, " → ".join(_cycle(graph))


def test_cycle_finder_finds_a_planted_circle():
    graph = _import_graph()
    graph["wcache._hip"] = graph["wcache._hip"] | {"wcache._device"}  # the circle this package had
    assert _cycle(graph) is not None
