"""Gated DeltaNet (Qwen3-Next, Qwen3.5): the decode update of the gated delta rule."""
