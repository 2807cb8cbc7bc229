"""The AdamW implementations shared by the families (models/optimizers.py, the `adamw` option): one set of values,
each family offering them or a declared subset, and for each value the same optimizer class and hyperparameters as
the family's reference (Pi0.5: openpi's; GR00T: Isaac-GR00T's, with its two weight-decay groups)."""

import dataclasses
from typing import get_args, get_type_hints

import pytest
import torch

from models import BUILT_IN, get_family
from models.clipped_adamw import ClippedAdamW, FusedClippedAdamW
from models.optimizers import ADAMW_KINDS, CUDA_ONLY, adamw_unsupported_reason, build_adamw
from models.schema import SchemaError
from models.workload import Workload

WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=24, action_horizon=6, lr=1e-4, model_size="tiny", dtype="fp32")
# per value: (class, fused); triton-clip needs CUDA (below)
CLASSES = {
    "foreach": (torch.optim.AdamW, None),
    "fused": (torch.optim.AdamW, True),
    "fused-clip": (FusedClippedAdamW, True),
    "compiled": (ClippedAdamW, None),
}
# per family: betas, eps, the groups' weight decays, the options that make the optimizer step capturable
REFERENCE = {
    "pi05": ((0.9, 0.95), 1e-8, [1e-10], {"cuda_graphs": "whole-step"}),
    "gr00t": ((0.9, 0.999), 1e-8, [1e-5, 0.0], {"vl_pad": 64, "cuda_graphs": True, "graph_optimizer": True}),
}


def offered(family) -> tuple[str, ...]:
    return get_args(get_type_hints(family.options_type)["adamw"])


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_each_family_offers_the_shared_values_or_a_subset(name):
    family = get_family(name)
    fields = {f.name for f in dataclasses.fields(family.options_type)}
    if "adamw" not in fields:
        pytest.skip(f"{name} has no adamw option")
    values = offered(family)
    assert values and set(values) <= set(ADAMW_KINDS), values
    assert family.parse_options({}).adamw == "foreach"  # every reference trains with torch's default
    with pytest.raises(SchemaError, match=f"^adamw: expected one of {', '.join(values)}, got string 'apex'$"):
        family.parse_options({"adamw": "apex"})


def test_gr00t_refuses_the_values_it_does_not_offer():
    family = get_family("gr00t")
    assert offered(family) == ("foreach", "fused", "compiled")
    with pytest.raises(SchemaError, match="^adamw: expected one of foreach, fused, compiled, got string 'fused-clip'$"):
        family.parse_options({"adamw": "fused-clip"})


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_each_value_builds_the_familys_reference_adamw(name):
    family = get_family(name)
    betas, eps, decays, graphed = REFERENCE[name]
    model = family.build("tiny", family.parse_options({}), WORKLOAD, "cpu", torch.float32, 0).model
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    for kind in offered(family):
        for extra in ({}, graphed):
            options = family.parse_options({"adamw": kind, **extra})
            if kind in CUDA_ONLY:
                if not extra:  # (CUDA graphs, refused on the CPU first)
                    assert family.unsupported_reason(options, "cpu", frozenset()) == adamw_unsupported_reason(
                        kind, "cpu"
                    )
                with pytest.raises(ValueError, match=f"adamw: {kind} needs the parameters on a CUDA device"):
                    family.optimizer(model, options, WORKLOAD, "cpu")
                continue
            optimizer = family.optimizer(model, options, WORKLOAD, "cpu")
            cls, fused = CLASSES[kind]
            assert type(optimizer) is cls, (kind, type(optimizer))
            assert [g["weight_decay"] for g in optimizer.param_groups] == decays
            assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) == trainable
            for group in optimizer.param_groups:
                assert (group["lr"], group["betas"], group["eps"], group["fused"]) == (WORKLOAD.lr, betas, eps, fused)
                # the compiled update keeps its counters on the device always; the others when a graph captures them
                assert group["capturable"] is (kind == "compiled" or bool(extra)), (kind, extra)
            assert getattr(optimizer, "max_norm", 1.0) == 1.0  # the clipping each family's step asks for


def test_the_triton_value_is_cuda_only_and_copies_are_the_compiled_ones():
    assert adamw_unsupported_reason("triton-clip", "cpu") == (
        "adamw: triton-clip runs Triton kernels on a CUDA device; this target's backend is cpu"
    )
    assert adamw_unsupported_reason("triton-clip", "cuda") is None
    assert all(adamw_unsupported_reason(kind, "npu") is None for kind in set(ADAMW_KINDS) - CUDA_ONLY)
    weight = torch.nn.Parameter(torch.zeros(4))
    hyper = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, max_norm=1.0)
    with pytest.raises(ValueError, match="adamw: fused writes no weight copies"):
        build_adamw([weight], "fused", copies=[(weight, weight.detach().bfloat16())], **hyper)
    with pytest.raises(ValueError, match="adamw: expected one of foreach, fused, fused-clip, compiled, triton-clip"):
        build_adamw([weight], "apex", **hyper)
    # no weight_decay: each group's own, the rest torch's default
    assert (
        build_adamw([weight], "foreach", **hyper).defaults["weight_decay"]
        == torch.optim.AdamW([weight]).defaults["weight_decay"]
    )
