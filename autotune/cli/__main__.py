"""python -m autotune.cli ..."""
from autotune.cli.app import main

main()
