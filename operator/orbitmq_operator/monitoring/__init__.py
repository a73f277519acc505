"""Monitoring artefacts derived from code: the Grafana dashboards shipped with the chart.

- :mod:`.dashboards` builds the dashboards with ``grafana-foundation-sdk`` (pure; ``python -m
  orbitmq_operator.monitoring DIR`` writes ``<name>.json`` files, which ``scripts/gen-dashboards``
  runs to fill ``charts/orbitmq/dashboards/``);
  each dashboard's panels are in its own module under :mod:`.boards`, written with the panel
  vocabulary of :mod:`.panels`;
- :mod:`.inventory` reads the metric families orbitmq's processes and the operator define, from
  their source, so tests can check that every dashboard query names a real family and label;
- :mod:`.queries` lists a dashboard's panel queries and substitutes Grafana's variables in them
  as Grafana does, so each query can be run against a real Prometheus.
"""
