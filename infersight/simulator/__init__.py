"""A simulated inference fleet: a faithful stand-in for vLLM servers, with fault injection.

Nothing in CI has a GPU or a real inference server, so demos, end-to-end tests and benchmarks
run against this package. It owns:

- ``profiles``: model and GPU profiles (the numbers live in ``profiles/*.yaml``);
- ``engine``: a discrete-event model of one continuous-batching server;
- ``workload``: arrival processes and request mixes; ``faults``: injected faults;
- ``scenario`` / ``specs``: scenario files (``apiVersion: infersight/v1``) parsed at the edge;
- ``fleet``: several instances run together in virtual time, with ground truth;
- ``sinks``: the real output formats (store, OTLP spans, vLLM and dcgm-exporter ``/metrics``);
- ``realtime``: an OpenAI-compatible streaming endpoint whose timing follows the model.

It depends on ``core`` only (plus the simulator extra's third-party packages).
"""
