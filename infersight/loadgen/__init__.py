"""Load generator for OpenAI-compatible streaming endpoints (``infersight loadtest``).

``client`` sends one streamed request and times its tokens; ``workload`` chooses input and
output lengths (a distribution, a long-tail mix, or a replay of production records);
``scenarios`` turns steady / step / burst / long-tail into phases of fixed concurrency;
``runner`` drives the phases with closed-loop users on one event loop while ``monitor``
watches that the generator itself is not the bottleneck; ``progress`` draws the bar.

``--engine locust`` spreads the same users over Locust worker processes: ``locust_engine``
(the CLI's side: no Locust import) starts ``locust_master`` and ``locust --worker`` processes
that load ``locust_user``; ``distributed`` is what they exchange and how their results merge.
Both engines time a stream with ``core.streaming``.
"""
