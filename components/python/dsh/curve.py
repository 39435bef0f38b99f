"""CURVE for a party that connects to a broker: its own certificate and the
broker's public one, as `dsh keygen` writes them (czmq zcert files: the
public file at PATH, the secret at PATH_secret)."""

import os

import zmq
import zmq.auth


def load_keys(cert, broker_cert):
    """(public, secret, broker public) keys from certificate files, or
    ValueError saying which file is wrong."""
    secret_path = cert + "_secret" if os.path.exists(cert + "_secret") else cert
    try:
        public, secret = zmq.auth.load_certificate(secret_path)
    except (OSError, ValueError) as error:
        raise ValueError("cannot read certificate %s: %s" % (secret_path, error)) from None
    if not secret:
        raise ValueError("certificate %s has no secret key (the %s_secret file)" % (cert, cert))
    try:
        server, _ = zmq.auth.load_certificate(broker_cert)
    except (OSError, ValueError) as error:
        raise ValueError("cannot read the broker's certificate %s: %s" % (broker_cert, error)) from None
    return public, secret, server


def secure(sock, cert, broker_cert):
    """Make sock a CURVE client when both certificates are given (before
    connect); either one not given comes from $DSH_CERT / $DSH_BROKER_CERT,
    as for every dsh program."""
    cert = cert or os.environ.get("DSH_CERT") or None
    broker_cert = broker_cert or os.environ.get("DSH_BROKER_CERT") or None
    if not cert and not broker_cert:
        return
    if not cert or not broker_cert:
        raise ValueError("CURVE needs both cert= and broker_cert= (or $DSH_CERT and $DSH_BROKER_CERT)")
    public, secret, server = load_keys(cert, broker_cert)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.CURVE_SERVERKEY, server)
