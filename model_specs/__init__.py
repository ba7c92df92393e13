"""The shipped model specs: one YAML per model, each the real config.json of its checkpoint."""
