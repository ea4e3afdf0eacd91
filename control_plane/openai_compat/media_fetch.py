"""Fetching a media URL (OMNISTAGE_FETCH_MEDIA_URLS=1) without becoming a proxy into the
server's own network.

Every hop is checked the same way: the scheme is http(s), the host is on the allow-list
(OMNISTAGE_MEDIA_URL_HOSTS, when set), and every address the host resolves to is public:
private, loopback, link-local, multicast, reserved and unspecified addresses are refused
unless a network of OMNISTAGE_MEDIA_URL_ALLOWED_NETWORKS holds them. The connection then goes
to the very address that was checked (the Host header and TLS name stay the host's), so a
second DNS answer cannot swap it. Redirects are followed by hand, at most MAX_REDIRECTS,
each re-checked; the body is capped at OMNISTAGE_MAX_MEDIA_BYTES and the whole fetch at
OMNISTAGE_MEDIA_FETCH_TIMEOUT_S. A refusal or failure tells the client one generic sentence;
the reason (an internal service's port or status) goes to the server log only.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
from django.conf import settings

log = logging.getLogger(__name__)

MAX_REDIRECTS = 3
REDIRECTS = (301, 302, 303, 307, 308)


class FetchRefused(Exception):
    """Why a fetch was refused or failed: for the log, never for the client."""


class MediaTooLarge(Exception):
    pass


async def fetch_media(url: str, limit: int) -> tuple[bytes, str]:
    """(body, content type) of `url`; FetchRefused, MediaTooLarge."""
    try:
        async with asyncio.timeout(settings.MEDIA_FETCH_TIMEOUT_S):
            async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
                for _ in range(MAX_REDIRECTS + 1):
                    response = await _get(client, url)
                    try:
                        if response.status_code in REDIRECTS and "location" in response.headers:
                            url = urljoin(url, response.headers["location"])
                            continue
                        if response.status_code != 200:
                            raise FetchRefused(f"HTTP {response.status_code} from {url}")
                        return await _read(response, limit), _content_type(response)
                    finally:
                        await response.aclose()
                raise FetchRefused(f"more than {MAX_REDIRECTS} redirects")
    except TimeoutError:
        raise FetchRefused(f"no answer within {settings.MEDIA_FETCH_TIMEOUT_S} s") from None
    except httpx.HTTPError as error:
        raise FetchRefused(f"{type(error).__name__}: {error}") from None


async def _get(client: httpx.AsyncClient, url: str) -> httpx.Response:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchRefused(f"not an http(s) URL: {url}")
    host = parts.hostname
    hosts = list(settings.MEDIA_URL_HOSTS or [])
    if hosts and host not in hosts:
        raise FetchRefused(f"host {host} is not in OMNISTAGE_MEDIA_URL_HOSTS")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = await _public_address(host, port)
    target = f"[{address}]" if ":" in address else address
    pinned = urlunsplit((parts.scheme, f"{target}:{port}", parts.path or "/", parts.query, ""))
    headers = {"Host": parts.netloc.rpartition("@")[2]}
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    request = client.build_request("GET", pinned, headers=headers, extensions=extensions)
    return await client.send(request, stream=True)


async def _public_address(host: str, port: int) -> str:
    """The first address `host` resolves to, when every one of them may be reached."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise FetchRefused(f"cannot resolve {host}: {error}") from None
    addresses = [info[4][0] for info in infos]
    if not addresses:
        raise FetchRefused(f"{host} resolves to no address")
    for address in addresses:
        if not address_allowed(ipaddress.ip_address(address.split("%")[0])):
            raise FetchRefused(f"{host} resolves to {address}, a non-public address")
    return addresses[0]


def address_allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    address = mapped or address
    allowed = [ipaddress.ip_network(network) for network in settings.MEDIA_URL_ALLOWED_NETWORKS]
    if any(address in network for network in allowed if network.version == address.version):
        return True
    return address.is_global and not (
        address.is_private or address.is_loopback or address.is_link_local or address.is_multicast
        or address.is_reserved or address.is_unspecified
    )  # fmt: skip


async def _read(response: httpx.Response, limit: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise MediaTooLarge()
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise MediaTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


def _content_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "").split(";")[0].strip()
