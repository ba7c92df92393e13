"""Serving-engine rules, one module per engine, each rule with the releases it holds for."""
