"""sessionledger benchmarks: every figure is a ratio to a raw floor measured in the same run.

Run everything with ``nox -s bench`` (or ``python -m bench.run`` in an environment that has
the packages and the peers installed); ``--quick`` gives smaller sizes and fewer repetitions
for iterating. The runner writes ``bench/RESULTS.md`` and ``bench/results.json``.

Modules: ``workloads`` (deterministic sessions), ``harness`` (interleaved timing,
statistics, the result model and the report), one ``fig_*`` module per figure group,
``run`` (the command line). None of this is part of the test suite: nothing here asserts
a timing.
"""
