"""Selective scans: the engine under every SSM surrogate (reference, CPU fast path, Triton)."""

from .reference import selective_scan_2d_ref, selective_scan_ref

__all__ = ["selective_scan_2d_ref", "selective_scan_ref"]
