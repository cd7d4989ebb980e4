"""Kafka TLS and SASL: the job's Secret references become the clients' settings.

TLS is tested end to end: a real broker (tansu) behind a TLS listener
(:mod:`tests.support.tls_proxy`, since tansu 0.6 cannot serve TLS itself here), reached by the
meter, the producer and the admin client with the CA — and for mutual TLS the client
certificate — read from a Secret laid out as files. A wrong CA, a plaintext client and a
missing client certificate are refused. SASL cannot be tested against tansu 0.6 with memory
storage (creating a SCRAM user needs an authenticated connection, and its SASL handshake
answered ``NoSharedMechanism``), so SASL is checked down to the exact kafka-python settings;
docs/install.md#kafka-credentials has the manual check against a real cluster.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from autoscaler.job.loading import parse_job
from autoscaler.kafka import clients
from autoscaler.kafka.credentials import LocalSecrets, SecretMissing, env_name, security_for
from autoscaler.kafka.local.broker import free_port, resolve_binary
from autoscaler.kafka.meter import KafkaMeter
from autoscaler.kafka.security import KafkaSecurity
from tests.support.tls_proxy import TlsProxy

ROOT = Path(__file__).resolve().parents[2]

OPENSSL = shutil.which("openssl")


def kafka_spec(**extra: object):
    doc = yaml_job()
    doc["spec"]["source"]["kafka"].update(extra)
    job, problems = parse_job(doc)
    assert job is not None and problems == [], problems
    return job.spec.source.kafka


def yaml_job() -> dict:
    import yaml

    doc = yaml.safe_load((ROOT / "examples/ctr-sync.yaml").read_text(encoding="utf-8"))
    doc["spec"]["throughput"] = {"model": "m.json"}
    return doc


def write_secret(root: Path, name: str, **keys: bytes) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    for key, value in keys.items():
        (root / name / key.replace("_", ".")).write_bytes(value)


# -- SASL and TLS settings (no broker) -------------------------------------------------------
@pytest.mark.parametrize(
    ("mechanism", "tls", "protocol"),
    [
        ("PLAIN", False, "SASL_PLAINTEXT"),
        ("SCRAM-SHA-256", True, "SASL_SSL"),
        ("SCRAM-SHA-512", True, "SASL_SSL"),
    ],
)
def test_sasl_credentials_from_the_environment_become_client_settings(mechanism, tls, protocol):
    extra: dict = {"sasl": {"mechanism": mechanism, "secretRef": {"name": "kafka-creds"}}}
    if tls:
        extra["tls"] = {}
    env = {
        env_name("kafka-creds", "username"): "trainer",
        env_name("kafka-creds", "password"): "s3cret\n",
    }
    sec = security_for(kafka_spec(**extra), "ml", LocalSecrets("/nonexistent", env=env).read)
    assert sec is not None and sec.protocol == protocol
    cfg = sec.client_config()
    assert cfg["sasl_mechanism"] == mechanism
    assert (cfg["sasl_plain_username"], cfg["sasl_plain_password"]) == ("trainer", "s3cret")
    assert ("ssl_context" in cfg) is tls
    assert "s3cret" not in repr(sec) and "s3cret" not in sec.describe()


def test_a_plaintext_job_has_no_security_and_missing_keys_are_named(tmp_path):
    assert security_for(kafka_spec(), "ml", LocalSecrets(tmp_path).read) is None
    write_secret(tmp_path, "kafka-creds", username=b"u")
    spec = kafka_spec(sasl={"mechanism": "PLAIN", "secretRef": {"name": "kafka-creds"}})
    with pytest.raises(SecretMissing, match=r"sasl.secretRef: Secret ml/kafka-creds has no key "):
        security_for(spec, "ml", LocalSecrets(tmp_path, env={}).read)


def test_a_client_certificate_needs_its_key():
    doc = yaml_job()
    doc["spec"]["source"]["kafka"]["tls"] = {"secretRef": {"name": "t", "certKey": "tls.crt"}}
    _, problems = parse_job(doc)
    assert [p for p, _ in problems] == ["spec.source.kafka.tls.secretRef.certKey"]


# -- TLS against the real broker -------------------------------------------------------------
def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    if OPENSSL is None:
        pytest.skip("openssl is not installed: cannot make the test certificates")
    d = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "other-ca"):
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            f"/CN=kale-test-{ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.crt", cwd=d,
        )  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=DNS:localhost\n")
    for leaf in ("broker", "client"):
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={leaf}",
            "-keyout", f"{leaf}.key", "-out", f"{leaf}.csr", cwd=d,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{leaf}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", f"{leaf}.crt",
            cwd=d,
        )  # fmt: skip
    return d


@pytest.fixture(scope="module")
def tls_broker(pki):
    """tansu on a private port, advertising ``localhost:<proxy>``; the proxy terminates TLS
    (a client certificate signed by the CA is required)."""
    inner = free_port()
    proxy = TlsProxy(
        inner, cert=pki / "broker.crt", key=pki / "broker.key", client_ca=pki / "ca.crt"
    )
    proc = subprocess.Popen(
        [
            str(resolve_binary()), "broker",
            "--listener-url", f"tcp://127.0.0.1:{inner}",
            "--advertised-listener-url", f"tcp://localhost:{proxy.port}",
            "--storage-engine", "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", inner), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "tansu did not start"
            time.sleep(0.1)
    proxy.start()
    yield f"localhost:{proxy.port}", proxy
    proxy.stop()
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.kafka
def test_the_meter_measures_through_tls_with_the_secrets_ca_and_client_certificate(
    pki, tls_broker, tmp_path, unique_name
):
    bootstrap, proxy = tls_broker
    secrets = tmp_path / "secrets"
    write_secret(
        secrets,
        "kafka-tls",
        ca_crt=(pki / "ca.crt").read_bytes(),
        tls_crt=(pki / "client.crt").read_bytes(),
        tls_key=(pki / "client.key").read_bytes(),
    )
    spec = kafka_spec(
        tls={"secretRef": {"name": "kafka-tls", "certKey": "tls.crt", "keyKey": "tls.key"}}
    )
    sec = security_for(spec, "ml", LocalSecrets(secrets, env={}).read)
    assert sec is not None and sec.protocol == "SSL" and sec.cert_pem is not None
    topic = unique_name("tls")
    assert clients.ensure_topic(bootstrap, topic, 2, security=sec) == 2
    producer = clients.producer(bootstrap, security=sec)
    for i in range(40):
        producer.send(topic, b"x%d" % i, partition=i % 2)
    producer.flush(timeout=10)
    clients.close_quietly(producer)
    meter = KafkaMeter(bootstrap, topic, unique_name("g"), window_s=0.5, security=sec)
    try:
        snap = meter.snapshot()
    finally:
        meter.close()
    assert sum(snap.highwater.values()) == 40 and snap.lag == 40
    assert proxy.handshakes >= 3  # every client connected through TLS


@pytest.mark.kafka
@pytest.mark.parametrize("case", ["wrong-ca", "no-client-certificate", "plaintext"])
def test_clients_without_the_right_material_are_refused(pki, tls_broker, case, monkeypatch):
    monkeypatch.setattr(clients, "BOOTSTRAP_TIMEOUT_MS", 1_500)  # a refusal is certain
    bootstrap, proxy = tls_broker
    failures = proxy.failures
    if case == "plaintext":
        sec = None
    else:
        ca = "other-ca.crt" if case == "wrong-ca" else "ca.crt"
        sec = KafkaSecurity(tls=True, ca_pem=(pki / ca).read_bytes())
        if case == "wrong-ca":
            sec = KafkaSecurity(
                tls=True,
                ca_pem=(pki / ca).read_bytes(),
                cert_pem=(pki / "client.crt").read_bytes(),
                key_pem=(pki / "client.key").read_bytes(),
            )
    with pytest.raises(clients.BrokerUnavailable):
        clients.admin_client(bootstrap, security=sec)
    if case != "wrong-ca":  # the client gives up first when it rejects the server
        assert proxy.failures > failures
