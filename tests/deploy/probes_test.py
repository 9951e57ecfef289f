#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The DaemonSet's kubelet probes (deploy/kubernetes/daemonset.yaml), made
the way the kubelet makes them, against `leakwatch run` with each web config
an operator may set: none, basic auth (as the README advises), TLS with basic
auth, and mTLS (RequireAndVerifyClientCert). The issue: with basic auth on,
the probes (which carry no credentials) failed and the DaemonSet went
unready; with mTLS a kubelet probe cannot pass a handshake at all.

leakwatch answers /healthz without credentials, and on a TLS port answers a
plain-HTTP /healthz (and nothing else), so the shipped probes (scheme HTTP)
pass in every case; an HTTPS probe passes too, except under mTLS, which this
test records. Written against the current manifests; when the deploy
manifests change, the probes are read from them again.

Root (the daemon loads BPF). Usage: probes_test.py SOURCE_DIR LEAKWATCH_BIN"""
import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning)
import crypt  # noqa: E402 (deprecated in 3.11, still in Debian 12's Python)
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import yaml

src, leakwatch = sys.argv[1], sys.argv[2]


def probes():
    with open(os.path.join(src, "deploy/kubernetes/daemonset.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    ds = next(d for d in docs if d.get("kind") == "DaemonSet")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    out = []
    for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
        p = container.get(kind)
        if not p:
            continue
        get = p["httpGet"]
        port = get["port"]
        out.append({"kind": kind, "path": get.get("path", "/"), "scheme": get.get("scheme", "HTTP"),
                    "port": ports.get(port, port), "timeout": p.get("timeoutSeconds", 1)})
    return out


def kubelet_get(port, path, scheme, timeout):
    """An HTTP GET as the kubelet's prober sends it: no credentials, no
    client certificate, server certificate not verified."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if scheme == "HTTPS":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        sock = ctx.wrap_socket(sock)
    req = (f"GET {path} HTTP/1.1\r\nHost: 10.0.0.7:{port}\r\nUser-Agent: kube-probe/1.29\r\n"
           "Accept: */*\r\nConnection: close\r\n\r\n")
    sock.sendall(req.encode())
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    sock.close()
    return int(data.split(b" ", 2)[1])


def run(cmd):
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_pki(d):
    ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
    run(f"openssl req -x509 {ec} -subj /CN=ca -days 1 -keyout {d}/ca.key -out {d}/ca.crt")
    run(f"openssl req -x509 {ec} -subj /CN=localhost -days 1 -addext subjectAltName=IP:127.0.0.1"
        f" -keyout {d}/server.key -out {d}/server.crt")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def check(name, web, d, expect_https):
    port = free_port()
    config = os.path.join(d, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(f'listen: "127.0.0.1:{port}"\n')
        if web:
            path = os.path.join(d, f"{name}-web.yml")
            with open(path, "w") as w:
                w.write(web)
            f.write(f"web_config_file: {path}\n")
    daemon = subprocess.Popen([leakwatch, "run", "--config", config], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    failures = 0
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        for p in probes():
            status = kubelet_get(port, p["path"], p["scheme"], p["timeout"])
            ok = 200 <= status < 400
            print(f"probes_test: {name}: {p['kind']} {p['scheme']} {p['path']}: {status}")
            failures += not ok
        # The same probe over HTTPS, as a manifest might change it to.
        if "tls_server_config" in web:
            try:
                status = kubelet_get(port, "/healthz", "HTTPS", 1)
            except (ssl.SSLError, OSError) as e:
                status = f"handshake failed ({type(e).__name__})"
            print(f"probes_test: {name}: an HTTPS probe would get: {status}")
            if (status == 200) != expect_https:
                failures += 1
        # The probes open nothing else: /metrics over plain HTTP stays closed
        # whenever credentials are configured.
        if web:
            status = kubelet_get(port, "/metrics", "HTTP", 1)
            if status == 200:
                print(f"probes_test: {name}: FAIL: /metrics answered a credential-less plain request")
                failures += 1
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    return failures


def main():
    if os.geteuid() != 0:
        print("probes_test: needs root (the daemon loads BPF)")
        return 1
    with tempfile.TemporaryDirectory() as d:
        make_pki(d)
        users = "basic_auth_users:\n  prometheus: " + crypt.crypt("pw", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)) + "\n"
        tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        mtls = tls + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
        failures = 0
        failures += check("plain", "", d, False)
        failures += check("basic-auth", users, d, False)
        failures += check("tls-basic-auth", tls + users, d, True)
        failures += check("mtls", mtls + users, d, False)
    print("probes_test: " + ("passed" if failures == 0 else f"{failures} failures"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
