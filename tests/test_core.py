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
