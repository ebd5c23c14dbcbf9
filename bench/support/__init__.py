"""Helpers of the benchmarks in bench/: shared settings, the dataset, measuring, one-cell workers; none is run by users."""
