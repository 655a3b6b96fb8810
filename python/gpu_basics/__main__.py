"""`python -m gpu_basics ARGS`: the gpu-basics command (see _cli.py)."""
import sys

from ._cli import main

sys.exit(main())
