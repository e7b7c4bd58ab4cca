"""wcache.engines._engine.load_or_publish_model: the three cases the vLLM and SGLang loaders share, on a real mock daemon."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

import wcache
from wcache.engines._engine import EngineOptions, NoDaemonFallbackError, load_or_publish_model


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.proj = nn.Linear(8, 4)
        self.register_buffer("scale", torch.arange(4, dtype=torch.float32))


def config():
    return wcache.CacheConfig(model="engine-load-test", engine_name="engine-load-test", engine_version="1",
                              device_capability="mock")


def run(world, socket=None, fallback="load"):
    calls = {"load": 0, "attach": 0}
    want = Tiny()

    def load():
        calls["load"] += 1
        return Tiny()

    def attach(weights):
        calls["attach"] += 1
        model = Tiny().to("meta")
        model.proj.weight = nn.Parameter(weights["proj.weight"], requires_grad=False)
        model.proj.bias = nn.Parameter(weights["proj.bias"], requires_grad=False)
        model.scale = weights["scale"]
        return model

    options = EngineOptions.from_mapping({"socket": socket or world.socket_path(world.uuids[0]),
                                          "fallback": fallback}, "test")
    model, weights = load_or_publish_model(options, "engine-load-test", None, config(), load, attach)
    assert model._wcache_weights is weights
    for name, t in want.state_dict().items():
        assert torch.equal(model.state_dict()[name], t), name
    return model, weights, calls


def test_three_cases_no_daemon_empty_daemon_serving(world):
    # No daemon: the engine's own load, unchanged.
    model, weights, calls = run(world)
    assert weights.source == "loaded" and calls == {"load": 1, "attach": 0}
    with pytest.raises(NoDaemonFallbackError):
        run(world, fallback="error")
    world.serve(0, None)
    # Empty daemon: loaded once, published, the model continues on the daemon's copies.
    model, weights, calls = run(world)
    assert weights.source == "published" and calls == {"load": 1, "attach": 0}
    published = weights.attachment
    assert published is not None and model.proj.weight.data_ptr() == weights["proj.weight"].data_ptr()
    # The daemon holds it: attached, the load never called.
    model2, weights2, calls = run(world)
    assert weights2.source == "attached" and calls == {"load": 0, "attach": 1}
    assert model2.proj.weight.data_ptr() == weights2["proj.weight"].data_ptr()
    weights2.release()
    weights.release()
    assert os.path.exists(world.socket_path(world.uuids[0]))
