"""The command line: a thin layer over the library, one module per command family."""
