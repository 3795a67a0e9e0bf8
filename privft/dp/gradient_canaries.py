"""White-box gradient canaries for DP-LoRA: Dirac gradients on the LoRA parameters, scored on the noised sums.

The one-run audit of DP-SGD (Steinke, Nasr and Jagielski 2023, arXiv 2305.08846, Section 6;
Nasr et al. 2023, "Tight auditing of differentially private machine learning", arXiv 2302.07956):
canary i is a fixed coordinate j_i of the flattened trainable parameters and its gradient is
C·e_{j_i}, of norm exactly C, so clipping leaves it as it is. Each canary is inserted with
probability ½ (seeded, recorded); an inserted canary joins each logical batch with the Poisson
rate q of the training sequences, and its gradient is added to the clipped sum before the noise.
The score of canary i is Σ_t ⟨e_{j_i}, g̃_t⟩, g̃_t the noised summed gradient of step t: m numbers
kept across the run, never a per-step gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from opacus.optimizers import DPOptimizer

from privft.dp.checks import DPConfigError

SCORE = "Σ over noised steps of the noised summed gradient at the canary's coordinate (white-box)"


class GradientCanaries:
    """`count` Dirac canaries: coordinates, inclusion bits and scores, drawn from `seed` when first bound."""

    def __init__(self, count: int, seed: np.random.SeedSequence) -> None:
        self.count = count
        self.seed = seed  # draws the coordinates and inclusion bits; OS entropy unless DPSettings.seed is set
        self.coordinates: np.ndarray | None = None  # distinct flat indices into the trainable parameters
        self.included: np.ndarray | None = None  # bool, each True with probability ½
        self.scores = np.zeros(count)
        self._layout: list[tuple[int, torch.Tensor, np.ndarray]] | None = None  # per parameter: offsets, canaries

    def bind(self, params: list[torch.Tensor]) -> None:
        """Draw the coordinates and inclusion bits over `params` (once), and map each coordinate to its parameter."""
        if self._layout is not None:
            return
        sizes = np.array([p.numel() for p in params])
        if self.coordinates is None:
            if self.count > sizes.sum():
                raise DPConfigError(f"gradient_canaries={self.count} is more than the {sizes.sum()} trainable "
                                    "parameters, and each canary needs a coordinate of its own: use fewer canaries "
                                    "or a larger LoRA rank.")
            rng = np.random.default_rng(self.seed)
            self.coordinates = rng.choice(sizes.sum(), size=self.count, replace=False)
            self.included = rng.random(self.count) < 0.5
        elif self.coordinates.max(initial=-1) >= sizes.sum():
            raise DPConfigError(f"The saved gradient canaries use coordinates up to {self.coordinates.max()}, but "
                                f"the model has {sizes.sum()} trainable parameters: resume with the same LoRA "
                                "settings.")
        starts = np.concatenate([[0], np.cumsum(sizes)])
        self._layout = []
        for index, (start, stop) in enumerate(zip(starts[:-1], starts[1:])):
            inside = np.flatnonzero((self.coordinates >= start) & (self.coordinates < stop))
            if len(inside):
                offsets = torch.as_tensor(self.coordinates[inside] - start, device=params[index].device)
                self._layout.append((index, offsets, inside))

    def inject(self, params: list[torch.Tensor], sampled: np.ndarray, max_grad_norm: float) -> None:
        """Add C·e_j to the clipped sum (`summed_grad`) for each canary sampled in this step."""
        for index, offsets, inside in self._layout:
            values = torch.as_tensor(sampled[inside] * max_grad_norm, dtype=params[index].summed_grad.dtype,
                                     device=offsets.device)
            params[index].summed_grad.view(-1).index_add_(0, offsets, values)

    def record(self, params: list[torch.Tensor]) -> None:
        """Add each canary's coordinate of the noised summed gradient (`grad`, before the 1/L scaling) to its score."""
        for index, offsets, inside in self._layout:
            self.scores[inside] += params[index].grad.view(-1)[offsets].double().cpu().numpy()

    def state_dict(self) -> dict[str, Any]:
        """The coordinates, inclusion bits and scores so far, JSON-ready (None before the first step)."""
        if self.coordinates is None:
            return {"count": self.count, "coordinates": None, "included": None, "scores": None}
        return {"count": self.count, "coordinates": self.coordinates.tolist(), "included": self.included.tolist(),
                "scores": self.scores.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint's canaries (`DPLoraEngine.load_state_dict` checks that their count is this run's)."""
        if state["coordinates"] is not None:
            self.coordinates = np.array(state["coordinates"], dtype=np.int64)
            self.included = np.array(state["included"], dtype=bool)
            self.scores = np.array(state["scores"], dtype=np.float64)
            self._layout = None


class CanaryDPOptimizer(DPOptimizer):
    """opacus' DPOptimizer that adds the sampled gradient canaries to the clipped sum before the noise, and scores them.

    `sampler` draws, each noised step, which canaries join the batch (inserted ones, each with
    probability `sample_rate`); it serves nothing else, so the training sequences' batches and the
    noise are those of the same run without canaries.
    """

    def __init__(self, *args: Any, canaries: GradientCanaries, sampler: torch.Generator, sample_rate: float,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.canaries, self.sampler, self.sample_rate = canaries, sampler, sample_rate

    def add_noise(self) -> None:
        """Inject this step's sampled canaries, noise the sum as opacus does, then add the canaries' scores."""
        self.canaries.bind(self.params)
        joins = (torch.rand(self.canaries.count, generator=self.sampler) < self.sample_rate).numpy()
        self.canaries.inject(self.params, joins & self.canaries.included, self.max_grad_norm)
        super().add_noise()
        self.canaries.record(self.params)
