"""Tuned plans where models run: the workload's dims read off a caller's shapes, the plan for
those dims (cached, adapted from the nearest tuned shape, or the heuristic one), parameters bound
once, and the PyTorch and JAX calling conventions (autotune.torch, autotune.jax)."""
