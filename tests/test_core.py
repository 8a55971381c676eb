"""The package-wide metrics of ``ssmpde.core``."""

import numpy as np
import pytest

from ssmpde.core import high_correlation_time


def test_high_correlation_time_counts_the_steps_before_the_correlation_drops():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(3, 6, 2, 16))
    frames = 2.0 * reference + 5.0  # affine copies: correlation exactly 1
    frames[0, 4:] = -reference[0, 4:]  # anti-correlated from step 4 (time 0.4)
    frames[1, 1:] = rng.normal(size=(5, 2, 16))  # uncorrelated from step 1
    # Sample 2 never drops: the whole horizon, 6 steps.
    assert high_correlation_time(frames, reference, 0.1) == pytest.approx((4 + 1 + 6) / 3 * 0.1)
    # A partial decorrelation counts against the threshold, not against 0.
    mixed = reference + 0.75 * rng.normal(size=reference.shape)  # correlation about 0.8
    corr = np.corrcoef(mixed[0, 0].ravel(), reference[0, 0].ravel())[0, 1]
    expected = 0.0 if corr < 0.5 else 1.0
    assert high_correlation_time(mixed[:1, :1], reference[:1, :1], 1.0, threshold=0.5) \
        == expected
    with pytest.raises(ValueError, match="must both be"):
        high_correlation_time(frames[:, :2], reference, 0.1)


def test_pooled_relative_l2_is_one_norm_over_the_horizon_not_the_mean_of_the_frames():
    import torch

    from ssmpde.core import pooled_relative_l2, relative_l2_per_frame

    # One sample, two frames of one field on two points. Frame 0: target (3, 4), norm 5,
    # error (1, 0): 1/5 = 0.2. Frame 1: target (0.6, 0.8), norm 1, error (0, 0.5): 0.5.
    target = np.array([[[[3.0, 4.0]], [[0.6, 0.8]]]])          # [batch, steps, field, x]
    prediction = target + np.array([[[[1.0, 0.0]], [[0.0, 0.5]]]])
    per_frame = relative_l2_per_frame(prediction, target)
    np.testing.assert_allclose(per_frame, [[0.2, 0.5]], rtol=1e-15)
    assert per_frame.mean() == pytest.approx(0.35)
    # Pooled: sqrt(1² + 0.5²) / sqrt(5² + 1²) = sqrt(1.25 / 26) = 0.21926450483
    pooled = pooled_relative_l2(prediction, target)
    np.testing.assert_allclose(pooled, [np.sqrt(1.25 / 26)], rtol=1e-15)
    assert pooled[0] == pytest.approx(0.21926450483, rel=1e-10)
    # Torch gives the same numbers (the trainer's log), and a second field is averaged, not
    # pooled: field 1 is field 0 times 1000 with a perfect prediction, error 0.
    both = torch.from_numpy(np.concatenate([target, 1000 * target], axis=2))
    guess = torch.from_numpy(np.concatenate([prediction, 1000 * target], axis=2))
    torch.testing.assert_close(pooled_relative_l2(guess, both),
                               torch.tensor([np.sqrt(1.25 / 26) / 2], dtype=torch.float64))
    torch.testing.assert_close(relative_l2_per_frame(guess, both),
                               torch.tensor([[0.1, 0.25]], dtype=torch.float64))
    # fields=False pools the fields too: the large field's norm swamps the error.
    np.testing.assert_allclose(
        pooled_relative_l2(guess.numpy(), both.numpy(), fields=False),
        [np.sqrt(1.25 / (26 * (1 + 1000 ** 2)))], rtol=1e-12)
