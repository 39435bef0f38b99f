"""CURVE: a Python component, client and watcher with `dsh keygen`
certificates, against a broker that serves CURVE only."""

import os
import subprocess

import dsh
from conftest import CLI, eventually, start_broker


def keygen(path, *args):
    subprocess.run([CLI, "keygen", path, *args], check=True, capture_output=True, timeout=10)


def test_curve_both_ways(tmp_path, processes, monkeypatch):
    allow = tmp_path / "allow"
    allow.mkdir()
    broker_cert, agent, comp = (str(tmp_path / name) for name in ("broker.cert", "agent.cert", "comp.cert"))
    keygen(broker_cert, "--role", "admin")
    keygen(agent, "--role", "agent", "--agent", "alice")
    keygen(comp, "--role", "component", "--components", "py-curve")
    for cert in (agent, comp):
        os.link(cert, allow / os.path.basename(cert))
    broker = start_broker(processes, "tcp://127.0.0.1:!", "--cert", broker_cert, "--allow", str(allow), "--curve")
    endpoint = broker.endpoint

    component = dsh.Component("py-curve", endpoint, cert=comp, broker_cert=broker_cert)

    @component.tool
    def whoami(ctx: dsh.Context) -> str:
        """The agent the broker says is calling."""
        return ctx.agent

    assert component.start(10)
    watcher = dsh.Watcher(endpoint, cert=agent, broker_cert=broker_cert)
    try:
        with dsh.Client(endpoint, cert=agent, broker_cert=broker_cert) as client:
            eventually(lambda: "whoami" in client.tools().names())
            #  The broker stamps the key's agent into the call
            assert client.call("whoami").text == "alice"
            spoofed = client.call("whoami", agent="mallory")
            assert spoofed.code == "FORBIDDEN"
        assert watcher.start(10) and "whoami" in watcher.tools
        #  Without a key the broker never answers; the handshake says why
        with dsh.Client(endpoint) as plain:
            refused = plain.call("whoami", timeout=30)
            assert refused.code == "BROKER_GONE"
            assert refused.text.startswith("Error: cannot talk to broker at %s: the broker " % endpoint), refused
        #  A key the broker does not allow: refused by name
        stranger = str(tmp_path / "stranger.cert")
        keygen(stranger, "--role", "agent", "--agent", "eve")
        with dsh.Client(endpoint, cert=stranger, broker_cert=broker_cert) as client:
            try:
                client.tools()
                raise AssertionError("a key not in the allow-list was answered")
            except dsh.DshError as error:
                assert "the broker refused this party's key" in error.message
        #  Keys from the environment, as for every dsh program
        monkeypatch.setenv("DSH_CERT", agent)
        monkeypatch.setenv("DSH_BROKER_CERT", broker_cert)
        with dsh.Client(endpoint) as client:
            assert client.call("whoami").text == "alice"
    finally:
        watcher.close()
        component.stop()
