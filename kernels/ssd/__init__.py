"""Mamba-2 (SSD) kernels: ``naive`` (references), ``state_update`` (decode), ``chunk`` (prefill scan)."""
