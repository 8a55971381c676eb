"""The normalised model: input layouts (history folded into channels, or kept as a history)
and the one autoregressive rollout."""

import dataclasses
from typing import ClassVar

import numpy as np
import torch

from ssmpde.core import autoregressive
from ssmpde.surrogates import ModelConfig
from ssmpde.surrogates.checkpoint import NormalisedModel
from ssmpde.surrogates.datasets import Normalizer, Task

TASK = Task("rollout", ("rho", "m"), ("rho", "m"), (6,), ("nu",), window=3, horizon=4,
            dt=0.1)
NORMS = {"fields": Normalizer([1.0, -2.0], [2.0, 0.5]), "conditioning": Normalizer([3.0], [4.0])}


@dataclasses.dataclass(frozen=True)
class HistoryConfig(ModelConfig):
    input_layout: ClassVar[str] = "history"
    in_channels: int = 1
    out_channels: int = 1
    window: int = 1
    grid: tuple[int, ...] = (6,)


class Recorder(torch.nn.Module):
    """Records what it is given; predicts the mean over the window of the field channels."""

    def __init__(self, config):
        super().__init__()
        self.config, self.seen = config, []

    def forward(self, x):
        self.seen.append(x)
        if self.config.input_layout == "history":
            return x[:, :, :2].mean(dim=1)
        return x[:, :6].unflatten(1, (3, 2)).mean(dim=1)


@dataclasses.dataclass(frozen=True)
class ChannelsConfig(HistoryConfig):
    input_layout: ClassVar[str] = "channels"


def test_for_task_gives_per_frame_channels_to_history_models():
    config = HistoryConfig.for_task(TASK)
    assert (config.in_channels, config.window, config.grid) == (3, 3, (6,))
    assert ChannelsConfig.for_task(TASK).in_channels == 3 * 2 + 1


def test_history_and_channels_layouts_see_the_same_normalised_values():
    rng = np.random.default_rng(0)
    history = torch.tensor(rng.standard_normal((2, 3, 2, 6)), dtype=torch.float64)
    conditioning = torch.tensor(rng.standard_normal((2, 4, 1, 6)), dtype=torch.float64)
    frames = {}
    for config in (HistoryConfig.for_task(TASK), ChannelsConfig.for_task(TASK)):
        model = Recorder(config)
        wrapped = NormalisedModel(model, TASK, NORMS)
        frames[config.input_layout] = wrapped.rollout(history, conditioning)
        first = model.seen[0]
        # Independent expectation: each frame normalised by its field's statistics, the
        # conditioning by its own, then laid out as the model asked.
        mean = torch.tensor([1.0, -2.0])[None, None, :, None]
        std = torch.tensor([2.0, 0.5])[None, None, :, None]
        fields = (history - mean) / std
        cond = (conditioning[:, 0] - 3.0) / 4.0
        if config.input_layout == "history":
            expected = torch.cat([fields, cond[:, None].expand(-1, 3, -1, -1)], dim=2)
        else:
            expected = torch.cat([fields.flatten(1, 2), cond], dim=1)
        torch.testing.assert_close(first, expected)
    torch.testing.assert_close(frames["history"], frames["channels"])
    assert frames["history"].shape == (2, 4, 2, 6)


def test_autoregressive_feeds_frames_back_in_numpy_and_torch():
    history = np.arange(2 * 2 * 1 * 3, dtype=float).reshape(2, 2, 1, 3)
    out = autoregressive(lambda k, window: window.sum(axis=1), history, 3)
    # x_{n+1} = x_n + x_{n-1}: a Fibonacci recurrence per entry
    a, b = history[:, 0], history[:, 1]
    expected = []
    for _ in range(3):
        a, b = b, a + b
        expected.append(b)
    np.testing.assert_array_equal(out, np.stack(expected, axis=1))
    torch_out = autoregressive(lambda k, window: window.sum(dim=1), torch.tensor(history), 3)
    np.testing.assert_array_equal(torch_out.numpy(), out)
    teacher = autoregressive(lambda k, window: window.sum(axis=1), history, 2,
                             feed=lambda k, frame: np.zeros_like(frame))
    np.testing.assert_array_equal(teacher[:, 1], history[:, 1])  # x1 + 0
