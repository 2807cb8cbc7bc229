"""Fast Pi0.5 inference for closed-loop evaluation: `sample_actions` (the prefix into a KV cache, then the Euler
steps) replayed from one CUDA graph per batch size.

Eager inference at small batches is launch-bound: one call runs thousands of small kernels (18 layers for the
prefix, then 18 expert layers per Euler step), and the host's launch time, not the GPU's work, sets the latency.
A CUDA graph records those launches once and replays them with one call. Inputs (images, tokens, masks and the
initial noise, drawn outside the graph) are copied into the graph's static buffers before each replay, so the
numbers are those of the eager call; each batch size has its own graph, captured on its first use (or all at
once with `capture`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: dict  # static input buffers, filled before each replay
    noise: torch.Tensor
    output: torch.Tensor


class GraphedSampler:
    def __init__(self, model, steps: int):
        self.model, self.steps = model, steps
        self.graphs: dict[int, _Captured] = {}

    def _capture(self, batch: dict, noise: torch.Tensor) -> _Captured:
        inputs = {k: v.clone() for k, v in batch.items()}
        static_noise = noise.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():  # warm-up off the capture: allocator and library set-up
            for _ in range(2):
                self.model.sample_actions(inputs, noise=static_noise, steps=self.steps)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.no_grad():
            output = self.model.sample_actions(inputs, noise=static_noise, steps=self.steps)
        return _Captured(graph, inputs, static_noise, output)

    def capture(self, batch: dict, noise: torch.Tensor) -> None:
        """Capture the graph of this batch's size now (e.g. for every batch size before timing starts)."""
        if noise.shape[0] not in self.graphs:
            self.graphs[noise.shape[0]] = self._capture(batch, noise)

    @torch.no_grad()
    def __call__(self, batch: dict, noise: torch.Tensor) -> torch.Tensor:
        self.capture(batch, noise)
        entry = self.graphs[noise.shape[0]]
        for key, buffer in entry.inputs.items():
            buffer.copy_(batch[key])
        entry.noise.copy_(noise)
        entry.graph.replay()
        return entry.output.clone()  # the next replay overwrites the static output
