"""The HTTP edge shared by ``podium serve`` and ``podium dashboard``: which addresses are this machine's only,
a listening socket with an error that says what to do, and a blocking uvicorn server that announces its
address (the real port when asked for port 0) and warns when it is reachable from elsewhere."""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any

from podium.deploy import require

__all__ = ["LOOPBACK_NAMES", "bind", "exposure_warning", "guard", "is_loopback", "run"]


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
    address = host.strip("[]")  # an IPv6 address as written in a URL
    try:
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((address, port), family=family)
    except OSError as exc:
        taken = exc.errno in (errno.EADDRINUSE, errno.EACCES)
        hint = "pass another --port (0: any free one)" if taken else "check --host: an address of this machine"
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}; {hint}") from None


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
"""The ``Host`` headers a server bound to loopback answers (what a browser, ``ssh -L`` or ``kubectl
port-forward`` sends); another name is a web page's DNS-rebinding attempt to read it."""


def guard(app: Any, host: str) -> Any:
    """``app`` as served on ``host``: on loopback, wrapped so that it answers only requests addressed to a
    loopback name (a web page the user opens elsewhere cannot point its own name at 127.0.0.1 and read it)."""
    if not is_loopback(host):
        return app
    trusted = require("starlette.middleware.trustedhost", "a server on loopback")
    return trusted.TrustedHostMiddleware(app, allowed_hosts=[*LOOPBACK_NAMES, host])


def run(app: Any, host: str, port: int, what: str, log_level: str = "warning") -> None:
    """Serve the ASGI ``app`` on ``host``:``port`` until Ctrl-C (blocking; returns normally then). SIGTERM stops
    it too (uvicorn shuts down, then the process ends by that signal, exit status 143).

    Prints ``WHAT: http://HOST:PORT/  (Ctrl-C stops)`` once it listens, and :func:`exposure_warning`. On
    loopback it answers only requests addressed to a loopback name (:data:`LOOPBACK_NAMES`, :func:`guard`).

    Raises:
        OSError: the port is taken or the address is not this machine's (nothing is served).
        ImportError: uvicorn is missing.
    """
    uvicorn = require("uvicorn", what)
    app = guard(app, host)
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
