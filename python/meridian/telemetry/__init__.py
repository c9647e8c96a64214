"""Exporters of Meridian's metric catalog (``meridian.metric_catalog()``).

Each exporter is its own submodule so that importing one never needs another's
optional dependency: ``meridian.telemetry.otlp`` (OpenTelemetry, the ``otel``
extra) and ``meridian.telemetry.prometheus`` (prometheus_client).
"""
