"""`helm test`: every operator replica serves /healthz and exactly one holds the
leader Lease (gpuaccept_leader 1 on its /metrics). Runs in the operator image
(Python's standard library only); finds the replicas through the headless test
Service's DNS records. Usage: helm-test.py HOST HEALTH_PORT METRICS_PORT DEADLINE_S"""

import socket
import sys
import time
import urllib.request


def get(ip: str, port: str, path: str) -> str:
    host = f"[{ip}]" if ":" in ip else ip
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as response:
        return response.read().decode()


def check(host: str, health: str, metrics: str) -> str | None:
    """None when the installation is healthy, else what is wrong."""
    ips = sorted({a[4][0] for a in socket.getaddrinfo(host, int(health), type=socket.SOCK_STREAM)})
    if not ips:
        return f"no operator replica behind {host}"
    for ip in ips:
        get(ip, health, "/healthz")  # raises on anything but 2xx
    leaders = [ip for ip in ips if "\ngpuaccept_leader 1.0" in "\n" + get(ip, metrics, "/metrics")]
    if len(leaders) != 1:
        return f"{len(leaders)} of {len(ips)} replicas hold the Lease ({', '.join(leaders)})"
    print(f"ok: {len(ips)} replica(s) serve /healthz; {leaders[0]} holds the Lease")
    return None


def main(host: str, health: str, metrics: str, deadline_s: str) -> int:
    deadline = time.monotonic() + float(deadline_s)
    while True:
        try:
            problem = check(host, health, metrics)
        except OSError as error:  # DNS not there yet, connection refused, HTTP error
            problem = f"{type(error).__name__}: {error}"
        if problem is None:
            return 0
        if time.monotonic() > deadline:
            print(f"FAILED: {problem}")
            return 1
        time.sleep(2)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
