"""Short causal depthwise convolution: ``naive`` (references), ``update`` (decode), ``prefill`` (packed varlen)."""
