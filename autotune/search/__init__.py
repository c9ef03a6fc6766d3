"""The search: configuration, per-search state, the local and shared loops, the model's proposals."""
