"""The benchmarks under bench/, run small to keep them working (not timed)."""
