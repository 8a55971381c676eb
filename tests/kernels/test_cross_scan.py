"""Traversals and merges are exact inverses, on non-square grids too."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ssmpde.kernels.cross_scan import (cross_merge, cross_merge_2d, cross_scan, cross_scan_2d,
                                       traverse, untraverse)

grids = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 9), st.integers(1, 9))


@given(shape=grids, order=st.integers(0, 3))
def test_traverse_and_untraverse_are_inverse(shape, order):
    x = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    seq = traverse(x, order)
    assert seq.shape == (*shape[:2], shape[2] * shape[3])
    assert torch.equal(untraverse(seq, order, *shape[2:]), x)
    assert torch.equal(traverse(untraverse(seq, order, *shape[2:]), order), seq)


def test_orders_are_the_documented_ones():
    x = torch.arange(6.0).reshape(1, 1, 2, 3)  # [[0 1 2], [3 4 5]]
    assert traverse(x, 0).flatten().tolist() == [0, 1, 2, 3, 4, 5]
    assert traverse(x, 1).flatten().tolist() == [0, 3, 1, 4, 2, 5]
    assert traverse(x, 2).flatten().tolist() == [5, 4, 3, 2, 1, 0]
    assert traverse(x, 3).flatten().tolist() == [5, 2, 4, 1, 3, 0]


@given(shape=grids)
def test_cross_merge_of_cross_scan_is_four_times_the_grid(shape):
    # integer-valued floats: the sum of four copies is exact, so equality is the right test
    x = torch.randint(-1000, 1000, shape).to(torch.float64)
    assert torch.equal(cross_merge(cross_scan(x), *shape[2:]), 4 * x)
    assert torch.equal(cross_merge_2d(cross_scan_2d(x)), 4 * x)
    corners = cross_scan_2d(x)
    assert torch.equal(corners[:, 3], x.flip(-2, -1))


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match="height, width"):
        traverse(torch.zeros(2, 3), 0)
    with pytest.raises(ValueError, match="order"):
        traverse(torch.zeros(1, 1, 2, 2), 4)
    with pytest.raises(ValueError, match="length"):
        cross_merge(torch.zeros(1, 3, 1, 4), 2, 2)
