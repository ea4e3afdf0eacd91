"""Connector transfers per replica, for /metrics: the totals each replica host reports with
its heartbeat (`ReplicaStatus.transfers`), kept on the replica row by the reconciler.

- omnistage_connector_transfers_total{deployment, stage, replica, connector, direction}  counter
- omnistage_connector_bytes_total{...}                                                   counter
- omnistage_connector_seconds_total{...}                                                 counter

`direction` is put, get, free (a shared-memory segment unlinked), export (a segment copied
into Redis for a reader on another host) or fallback (such a copy read).
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily

from control_plane.deployments.models import Replica

LABELS = ["deployment", "stage", "replica", "connector", "direction"]
MEASURES = {
    "count": ("connector_transfers", "Payload transfers through a connector."),
    "bytes": ("connector_bytes", "Payload bytes moved through a connector."),
    "seconds": ("connector_seconds", "Seconds spent moving payloads through a connector."),
}


class ConnectorCollector:
    def collect(self):
        families = {
            measure: CounterMetricFamily(f"omnistage_{name}", documentation, labels=LABELS)
            for measure, (name, documentation) in MEASURES.items()
        }
        replicas = Replica.objects.select_related("deployment").only("id", "stage", "transfers", "deployment__name")
        for replica in replicas:
            for name, totals in (replica.transfers or {}).items():
                connector, _, direction = name.partition(".")
                labels = [replica.deployment.name, replica.stage, str(replica.id), connector, direction]
                for measure, family in families.items():
                    family.add_metric(labels, float(totals.get(measure, 0)))
        yield from families.values()
