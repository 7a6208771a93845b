"""Run the white-paper benchmark suite (the same as `copal bench`; see README.md)."""
import sys
from copal.bench.runner import main
sys.exit(main())
