"""The HTTP edge shared by ``podium serve`` and ``podium dashboard``: which addresses are this machine's only,
a listening socket with an error that says what to do, and a blocking uvicorn server that announces its
address (the real port when asked for port 0) and warns when it is reachable from elsewhere."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from podium.deploy import require

__all__ = ["bind", "exposure_warning", "is_loopback", "run"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, or a name such as ``localhost``) only ever means this machine."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def exposure_warning(host: str, what: str) -> str | None:
    """The warning for a server without authentication that listens on ``host``; None on loopback."""
    if is_loopback(host):
        return None
    return (
        f"warning: {what} listens on {host} without authentication: anyone who can reach that address can use "
        "it. Keep it on 127.0.0.1 and tunnel (ssh -L), or put it behind a proxy that checks who asks."
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: any free port).

    Raises:
        OSError: the address cannot be used (the message says why and what to do).
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        hint = "pass another --port (0: any free one)" if port else "check --host"
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}; {hint}") from None


def run(app: Any, host: str, port: int, what: str, log_level: str = "warning") -> None:
    """Serve the ASGI ``app`` on ``host``:``port`` until Ctrl-C or SIGTERM (blocking; returns normally then).

    Prints ``WHAT: http://HOST:PORT/  (Ctrl-C stops)`` once it listens, and :func:`exposure_warning`.

    Raises:
        OSError: the port is taken or the address is not this machine's (nothing is served).
        ImportError: uvicorn is missing.
    """
    uvicorn = require("uvicorn", what)
    sock = bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    print(f"{what}: http://{shown}:{sock.getsockname()[1]}/  (Ctrl-C stops)", flush=True)
    warning = exposure_warning(host, what)
    if warning:
        print(warning, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=3))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn raises Ctrl-C again once it has shut down: that is how one stops it
        pass
    finally:
        sock.close()
