"""Ways into the workload language from other programs' IR."""
