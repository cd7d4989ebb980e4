"""A job's Kafka credentials from a Secret in its namespace, through the controller.

Cluster mode reads the Secret through the official client against the fake API server; the
meter is built with the credentials; a rotated Secret reconnects (a new meter) without
rebuilding the job; a missing Secret is the job's InvalidSpec naming the field.
"""

from __future__ import annotations

import base64

from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.cluster_jobs import ClusterJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.settings import ControllerSettings
from forecasting.registry import make_forecaster
from kube.client import RetryPolicy, connect
from kube.custom_resources import ElasticTrainingJobs
from kube.secrets import Secrets
from tests.support.controller_fakes import SYNC_MODEL, FakeClock, FakeKubeApi, TraceMetrics, job_doc


def secret(password: str) -> dict:
    enc = {k: base64.b64encode(v.encode()).decode() for k, v in (("username", "trainer"),)}
    enc["password"] = base64.b64encode(password.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "kafka-creds", "namespace": "ml"},
        "type": "Opaque",
        "data": enc,
    }


def test_the_meter_gets_the_jobs_credentials_and_a_rotation_reconnects(tmp_path):
    with FakeKubeApi() as api:
        doc = job_doc("sasl")
        doc["spec"]["source"]["kafka"]["sasl"] = {
            "mechanism": "SCRAM-SHA-256",
            "secretRef": {"name": "kafka-creds"},
        }
        doc["spec"]["source"]["kafka"]["tls"] = {}
        api.put(doc)
        kube = connect(
            kubeconfig=api.kubeconfig(tmp_path / "kc"),
            retry=RetryPolicy(attempts=2, sleep=lambda s: None),
        )
        crs = ElasticTrainingJobs(kube, namespaces=["ml"])
        clock = FakeClock()
        made = []

        def meter(entry):
            made.append(entry.kafka_security)
            return TraceMetrics(clock, lambda t: 50_000.0)

        controller = Controller(
            jobs_source=ClusterJobs(
                crs.list, models_dir=SYNC_MODEL.parent, secrets=Secrets(kube).read
            ),
            meter_factory=meter,
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=60),
            actuator_factory=lambda e: DryRunActuator(),
            clock=clock,
            status_sink=crs,
            settings=ControllerSettings(identity="kale-0"),
        )
        try:
            controller.tick()  # no Secret yet: the job says so, and is not managed
            status = api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "sasl")["status"]
            ready = next(c for c in status["conditions"] if c["type"] == "Ready")
            assert ready["reason"] == "InvalidSpec"
            assert (
                "spec.source.kafka.sasl.secretRef: Secret ml/kafka-creds does not exist"
                in (ready["message"])
            )
            assert "ml/sasl" not in controller.runtimes
            api.put(secret("first"))
            controller.tick()
            rt = controller.runtimes["ml/sasl"]
            assert made[-1].protocol == "SASL_SSL" and made[-1].password == "first"
            first_meter = rt.meter
            api.put(secret("second"))  # rotated
            clock.advance(60)
            controller.tick()
            assert controller.runtimes["ml/sasl"] is rt  # the job (and its forecaster) stays
            assert rt.meter is not first_meter and first_meter.closed
            assert made[-1].password == "second" and len(made) == 2
            status = api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "sasl")["status"]
            assert "first" not in str(status) and "second" not in str(status)
        finally:
            controller.close()
            kube.close()
