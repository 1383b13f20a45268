"""GPU sampling: a ``GpuSource`` protocol, the NVML source (``nvml``), dcgm-exporter through
the scraper, and ``build_gpu_sampler`` that turns ``--gpu-source`` into a sampler (or into
one clear log line when there is no GPU or no driver)."""
