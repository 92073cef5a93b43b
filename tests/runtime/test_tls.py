"""The API beyond loopback: refused in clear HTTP (one line, before anything starts); with a certificate and its key,
served over HTTPS, which the CLI's client verifies against the certificate the service recorded. The certificates
are made here (openssl), for 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_cli_local import REPO, Up

from pollux.errors import ServiceError
from pollux.runtime.api import ApiServer, Client, write_endpoint, write_token
from pollux.runtime.local import LocalLauncher
from pollux.runtime.service import Service, ServiceConfig

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")


def certificate(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM)."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days",
         "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
         str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


def up(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pollux", "up", *args], capture_output=True, text=True, timeout=60, cwd=REPO
    )


def test_listening_beyond_loopback_needs_tls_and_a_certificate_with_its_key(tmp_path):
    state = tmp_path / "state"
    cert, _ = certificate(tmp_path, "server")
    refusals = {
        ("--listen", "0.0.0.0:8443"): "beyond this machine in clear HTTP; add --tls-cert FILE --tls-key FILE",
        ("--listen", "127.0.0.1"): "--listen must be ADDR:PORT",
        ("--tls-cert", str(cert)): "--tls-cert and --tls-key go together",
        ("--tls-cert", str(cert), "--tls-key", str(cert)): f"--tls-key {cert}: not a certificate and its private key",
    }
    for args, message in refusals.items():
        result = up(*args, "--state-dir", str(state))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and message in lines[0], (args, result.stderr)
        assert not state.exists()  # refused before anything starts


def test_the_api_serves_https_that_the_client_verifies_against_the_recorded_certificate(tmp_path):
    cert, key = certificate(tmp_path, "server")
    config = ServiceConfig(state_dir=tmp_path / "state", policy="fifo", interval_s=0.5, tick_s=0.05)
    service = Service(config, LocalLauncher(1, stop_grace_s=5.0))
    server = ApiServer(service, write_token(config.state_dir), tls=(cert, key))
    server.start()
    try:
        assert server.url.startswith("https://127.0.0.1:")
        write_endpoint(config.state_dir, server.url, cert)
        client = Client(config.state_dir)
        assert client.health()["ok"] and client.jobs() == []
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(server.url + "/v1/health", timeout=10)  # the system's authorities alone: refused
        plain = server.url.replace("https:", "http:") + "/v1/health"
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(plain, timeout=10)  # no clear HTTP on the TLS port
        other, _ = certificate(tmp_path, "other")
        write_endpoint(config.state_dir, server.url, other)
        with pytest.raises(ServiceError, match="failed the TLS check"):
            Client(config.state_dir).health()
    finally:
        server.close()
        service.launcher.shutdown()
        service.store.close()


@pytest.mark.e2e
def test_pollux_up_with_tls_is_driven_by_the_cli_over_https(tmp_path):
    cert, key = certificate(tmp_path, "server")
    state = tmp_path / "state"
    service = Up(state, "--slots", "1", "--listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert Client(state).url.startswith("https://127.0.0.1:")
        listed = service.cli("ls")
        assert listed.returncode == 0, listed.stderr
    finally:
        service.down()
