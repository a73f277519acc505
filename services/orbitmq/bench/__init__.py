"""Benchmarks behind ``orbitmq bench …``: each figure is printed with a baseline measured in
the same run, so the ratio holds on a noisy machine."""
