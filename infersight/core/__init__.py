"""The pure domain of infersight.

Record types, windows, quantile sketches and the arithmetic that later layers (SLOs, cost,
baselines, capacity) build on. Nothing here performs IO, reads the environment, looks at a
clock or logs: every input, including "now", is an argument.
"""
