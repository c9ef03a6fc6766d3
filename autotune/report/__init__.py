"""What a search found, for people: show-best, Graphviz, plots."""
