"""Checking a ``--ray-address`` before Ray is asked to connect to it.

``ray.init(address=...)`` retries an unreachable GCS for a long time ("Failed to connect to
GCS", over and over); a short TCP connect first turns a typo or a cluster that is down into
one line (exit 2) within :data:`CONNECT_TIMEOUT_S`.
"""

from __future__ import annotations

import socket

from autotune.errors import SpecError
from autotune.spec.reading import excerpt

CONNECT_TIMEOUT_S = 3.0
"""How long the reachability check waits for the cluster's port."""

_NOT_CHECKED = ("auto", "local")
"""Addresses Ray resolves itself (``auto``: the running cluster's bootstrap file)."""


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT``, ``ray://HOST:PORT`` or ``[IPv6]:PORT``."""
    source = "--ray-address"
    rest = address.strip()
    for scheme in ("ray://", "ray+ssl://"):
        if rest.startswith(scheme):
            rest = rest[len(scheme) :]
    host, sep, port_text = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit():
        raise SpecError(
            f"expected HOST:PORT (or ray://HOST:PORT, or auto), got {excerpt(address)!r}",
            source=source,
        )
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise SpecError(f"port {port} is not in 1..65535", source=source)
    return host, port


def check_ray_address(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse (SpecError, one line) an address whose port does not accept a TCP connection
    within ``timeout_s``; None, ``auto`` and ``local`` are left to Ray."""
    if address is None or address.strip() in _NOT_CHECKED:
        return
    if not address.strip():
        raise SpecError("empty address (give HOST:PORT, or auto)", source="--ray-address")
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except socket.gaierror as exc:
        why = f"cannot resolve host {excerpt(host)!r} ({exc.strerror or exc})"
    except TimeoutError:
        why = f"no answer within {timeout_s:g} s"
    except OSError as exc:
        why = exc.strerror or str(exc)
    else:
        return
    raise SpecError(
        f"cannot reach the Ray cluster at {excerpt(address)}: {why}", source="--ray-address"
    )
