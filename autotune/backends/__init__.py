"""Where candidates are built and measured: the Backend and Plan protocols, the measuring worker,
and one subpackage per device kind."""
