"""Pi0.5 inference replayed from CUDA graphs gives the eager call's actions (GPU only: skipped on a CPU)."""

from dataclasses import replace

import pytest
import torch

from models.pi05 import FAMILY, parse_options
from models.pi05.inference import GraphedSampler
from models.workload import Workload

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


def test_graphed_sampling_matches_eager_and_reuses_one_graph_per_batch_size():
    workload = Workload(batch_size=3, cameras=2, text_tokens=24, action_horizon=6)
    opts = parse_options({"camera_slots": "auto", "attention": "sdpa", "recompute": "none"})
    model = FAMILY.build("tiny", opts, workload, "cuda", torch.bfloat16, seed=0).model.eval()
    sampler = GraphedSampler(model, steps=10)
    for batch_size in (3, 1, 3):
        batch = FAMILY.make_batches("tiny", replace(workload, batch_size=batch_size), 1, "cuda", torch.bfloat16, 1)[0]
        inputs = {k: batch[k] for k in ("images", "image_masks", "tokens", "token_masks")}
        noise = torch.randn(batch_size, 6, 32, device="cuda")
        eager = model.sample_actions(inputs, noise=noise, steps=10)
        graphed = sampler(inputs, noise)
        assert torch.allclose(graphed, eager, atol=1e-3, rtol=1e-3)
    assert sorted(sampler.graphs) == [1, 3]
