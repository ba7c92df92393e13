"""Decode and prefill speed per GPU from bytes and FLOPs: ``work`` (what a step reads, writes and computes on
one rank, from the planner's own footprint and weights), ``model`` (time from work against a GPU's datasheet
figures, ``gpus``), ``bench`` (what a serving benchmark prints)."""
