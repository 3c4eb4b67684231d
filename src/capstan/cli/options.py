"""Option values several commands share: durations (``90``, ``90s``, ``5m``, ``1.5h``) and the leader Lease's
name and duration. Each bad value is one :class:`~capstan.errors.UserError` line naming the option."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NoReturn

import typer

from capstan.errors import UserError

if TYPE_CHECKING:
    from capstan.kube import KubeClient

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")
# a Lease's name is a DNS subdomain (RFC 1123): lower-case alphanumerics, '-' and '.', at most 253 characters
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MIN_LEASE_S = 3.0

# the options every singleton (record, restarts run, capacity run) and every probed server shares
LEASE_NAMESPACE = typer.Option("kube-system", "--lease-namespace", help="Namespace of the Lease.")
LEASE_DURATION = typer.Option(
    "15s",
    "--lease-duration",
    help="A leader that has not renewed for this long is replaced (renews every 2/15 of it).",
)
PROBE_ADDRESS = typer.Option(
    "127.0.0.1", "--probe-address", help="Address of the probe server (0.0.0.0 in a pod)."
)


def probe_port_option(serves: str) -> int | None:
    """``--probe-port``: what the probe server ``serves`` on that port (capstan.probes)."""
    value: int | None = typer.Option(
        None, "--probe-port", min=1, max=65535, help=f"Serve {serves} on this port."
    )
    return value


def parse_duration(text: str, option: str) -> float:
    """``90``, ``90s``, ``5m`` or ``1.5h`` in seconds; anything else is a one-line error naming the option."""
    m = _DURATION.match(text)
    if not m:
        raise UserError(f"{option} {text!r}: expected seconds, or a number with s/m/h (e.g. 5m)")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def parse_interval(text: str, option: str) -> float:
    """:func:`parse_duration` of an interval, which must be longer than 0 s."""
    seconds = parse_duration(text, option)
    if not seconds > 0:
        raise UserError(f"{option} {text!r}: must be longer than 0 s")
    return seconds


def parse_lease_duration(text: str, option: str = "--lease-duration") -> float:
    """A leader Lease's duration: at least 3 s (its holder renews every 2/15 of it)."""
    seconds = parse_interval(text, option)
    if seconds < MIN_LEASE_S:
        raise UserError(f"{option} {text!r}: must be at least {MIN_LEASE_S:.0f} s")
    return seconds


def check_lease_name(name: str, option: str = "--lease-name") -> str:
    """``name`` when it can name a Lease (a DNS subdomain); a one-line error otherwise."""
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise UserError(
            f"{option} {name!r}: a Lease name is lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit, at most 253 characters"
        )
    return name


async def check_lease_readable(client: KubeClient, namespace: str, name: str) -> None:
    """Read the Lease once before campaigning: one this identity may not read (403) is one line (``--leader-elect``),
    not a candidate that campaigns for ever; a Lease not there yet is fine (the first leader creates it), and an API
    server that does not answer is raised as it is (:mod:`capstan.startup` waits for it)."""
    from capstan.kube import ApiError, resources
    from capstan.startup import transient_reason

    try:
        await client.get(resources.LEASES, name, namespace)
    except ApiError as exc:
        if exc.not_found:
            return
        if transient_reason(exc) is not None:
            raise
        raise UserError(f"--leader-elect: cannot read the Lease {namespace}/{name}: {exc}") from None


def exit_lost_lease(command: str, namespace: str, name: str, then: str) -> NoReturn:
    """Exit 1 with the one line a leader that lost its Lease says (``then``: what it did and what comes next)."""
    import typer
    from rich.console import Console

    Console(stderr=True).print(
        f"{command}: lost the leader Lease {namespace}/{name}; {then}", markup=False, soft_wrap=True
    )
    raise typer.Exit(1)
