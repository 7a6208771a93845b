"""Run the codec seed experiments (the same as `copal bench --suite codecs`; see README.md).

Arguments are passed on: `python benchmarks/serialization.py --seeds 001 --reps 5`.
"""
import sys
from copal.bench.runner import main
sys.exit(main(["--suite", "codecs", *sys.argv[1:]]))
