"""What the benchmarks are built on and the tests reuse.

``python bench/bench_x.py`` puts the script's folder, ``bench/``, first on the module search
path, so a benchmark imports this package as ``harness``; the tests, which run from the
repository root, import it as ``bench.harness``. Its modules import one another relatively, so
they work under either name, and nothing adds to the search path.

* ``scenarios``: shipped scenarios, compressed to 20 minutes, stored and diagnosed
  (``bench_alerts`` and the diagnosis tests);
* ``real_path``: a scenario driven through the real path, from simulator through sidecars and
  the API's jobs to the notification outbox (``bench_diagnosis`` and ``tests/alerts``);
* ``diagnosis_matrix``: the adversarial scenario matrix ``bench_diagnosis`` runs, and reads
  back from its ``--json`` file (its smoke test too);
* ``baselines``: synthetic load-test runs (``bench_baseline`` and ``tests/baselines``);
* ``pgbouncer``: a real PgBouncer in transaction pooling mode in front of a PostgreSQL server
  (the store's PgBouncer tests and ``bench_fleet``);
* ``results``: the ``--json FILE`` a benchmark writes its figures to (the smoke tests run each
  benchmark as a user does and read it).
"""
