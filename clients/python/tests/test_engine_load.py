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


# Issue 35 item 8: a publication must be runnable. The fake below does what
# vLLM's CPU build does to an unquantized linear layer in its post-processing
# (dispatch_cpu_unquantized_gemm(remove_weight=True)): the weight moves into a
# packed copy inside a closure (``cpu_linear``) and the parameter is left empty.


class Packed(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.proj = nn.Linear(8, 4)

    def pack(self):
        packed = self.proj.weight.detach().clone()
        self.proj.cpu_linear = lambda x: torch.nn.functional.linear(x, packed, self.proj.bias)
        self.proj.weight = nn.Parameter(torch.empty(0), requires_grad=False)
        return self

    def forward(self, x):
        return self.proj.cpu_linear(x)


def packed_options(world, fallback="load"):
    return EngineOptions.from_mapping({"socket": world.socket_path(world.uuids[0]), "fallback": fallback}, "test")


def test_a_model_whose_weights_left_their_parameters_is_not_published(world):
    world.serve(0, None)
    x = torch.arange(16, dtype=torch.float32).reshape(2, 8)
    want = Packed().proj(x)

    def attach(weights):
        raise AssertionError("nothing was published: no attach")

    model, weights = load_or_publish_model(packed_options(world), "engine-load-test", None, config(),
                                           lambda: Packed().pack(), attach)
    assert weights.source == "loaded", weights
    assert "not published" in weights.reason and "proj.weight" in weights.reason and "no elements" in weights.reason
    assert torch.equal(model(x), want)  # the engine runs its own (packed) copy
    st = wcache.status(socket=world.socket_path(world.uuids[0]))
    assert not st.generations and st.bytes == 0, st  # the daemon holds nothing
    with pytest.raises(NoDaemonFallbackError, match="proj.weight"):
        load_or_publish_model(packed_options(world, "error"), "engine-load-test", None, config(),
                              lambda: Packed().pack(), attach)


def test_an_attach_that_fails_its_check_loads_on_its_own(world):
    """The daemon holds what an integration without the check published (the
    empty weight); the next start's post-attach check fails: it ends its
    lease, loads from disk and says why, and never runs on the daemon's
    tensors."""
    world.serve(0, None)
    sock = world.socket_path(world.uuids[0])
    table = wcache.engines._modules.module_table(Packed().pack())
    assert tuple(table.tensors["proj.weight"].shape) == (0,)
    wcache.publish(config(), table.tensors, metadata=table.metadata, socket=sock)
    x = torch.arange(16, dtype=torch.float32).reshape(2, 8)
    ref = Packed()
    calls = {"load": 0}

    def load():
        calls["load"] += 1
        return Packed()

    def attach(weights):
        model = Packed().to("meta")
        declared = {n: tuple(p.shape) for n, p in model.named_parameters()}
        wcache.engines._modules.install(model, weights, weights.metadata, check_shapes=False)
        problems = wcache.engines._modules.unrunnable(model, lambda mod_name, mod, leaf: declared[f"{mod_name}.{leaf}"])
        if problems:
            raise wcache.engines._modules.NotRunnableError(problems, "the publication does not hold the declared weights")
        return model

    model, weights = load_or_publish_model(packed_options(world), "engine-load-test", None, config(), load, attach)
    assert weights.source == "loaded" and calls["load"] == 1
    assert "not runnable" in weights.reason and "proj.weight" in weights.reason, weights.reason
    assert "declares [4, 8]" in weights.reason, weights.reason
    assert torch.equal(model.proj(x), ref.proj(x))
    st = wcache.status(socket=sock)
    assert sum(len(g.leases) for g in st.generations) == 0, st  # the lease was ended
    with pytest.raises(NoDaemonFallbackError, match="not runnable"):
        load_or_publish_model(packed_options(world, "error"), "engine-load-test", None, config(), load, attach)


def test_unrunnable_names_empty_meta_and_misshapen_parameters():
    model = Packed().pack()
    assert wcache.engines._modules.unrunnable(model) == [("proj.weight", "has no elements ([0]): the weight is not in the "
                                                               "tensor")]
    assert wcache.engines._modules.unrunnable(Packed()) == []
    problems = wcache.engines._modules.unrunnable(Packed(), lambda mod_name, mod, leaf: (8, 4) if leaf == "weight" else None)
    assert problems == [("proj.weight", "holds [4, 8] (32 elements), the layer declares [8, 4]")]
    meta = Packed().to("meta")
    assert [n for n, _ in wcache.engines._modules.unrunnable(meta)] == ["proj.weight", "proj.bias"]
