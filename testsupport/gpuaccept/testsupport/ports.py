"""Free local TCP ports for the processes a test starts (the operator's metrics and health)."""

import socket
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that were free a moment ago.

    All sockets stay bound until every port is chosen, so the ports differ from
    one another (two separate ``bind(0)`` calls may return the same port).
    """
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
