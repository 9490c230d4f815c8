"""Addresses a user gives (``--engine``, ``--prometheus``): parsed and checked once, at the option.

A URL that ``urllib`` cannot parse (``http://[::1``), a scheme other than http(s), a port outside
1-65535, or a host name the resolver cannot take (a label longer than 63 characters, a name longer
than 253, characters IDNA refuses, spaces or control characters) is one line, exit 2, before any
connection: the resolver would otherwise raise ``UnicodeError`` from deep inside ``socket``.
No heavy imports.
"""

from __future__ import annotations

import ipaddress
import urllib.parse

from kvdash.errors import InputError

MAX_HOST = 253  # RFC 1035 section 2.3.4 (255 octets on the wire, 253 as text)
MAX_LABEL = 63
MAX_URL = 2048


def host_problem(host: str) -> str:
    """Why ``host`` (a name or an IP address, without brackets) cannot be connected to; "" when it can.

    >>> host_problem("node-a"), host_problem("10.0.0.5"), host_problem("::1")
    ('', '', '')
    >>> host_problem("x" * 64)
    'the host name has a label of 64 characters (at most 63)'
    """
    if not host:
        return "no host name"
    try:
        ipaddress.ip_address(host)
        return ""
    except ValueError:
        pass
    if any(c.isspace() or ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in host):
        return "the host name holds a space or a control character"
    if len(host) > MAX_HOST:
        return f"the host name has {len(host):,} characters (at most {MAX_HOST})"
    labels = host.rstrip(".").split(".")
    longest = max(len(label) for label in labels)
    if longest > MAX_LABEL:
        return f"the host name has a label of {longest:,} characters (at most {MAX_LABEL})"
    if any(not label for label in labels):
        return "the host name has an empty label (two dots in a row, or a leading dot)"
    try:
        encoded = host.encode("idna")
    except UnicodeError as exc:
        return f"the host name is not a valid international name ({str(exc)[:60]})"
    if len(encoded) > MAX_HOST:
        return f"the host name is {len(encoded):,} characters once encoded (at most {MAX_HOST})"
    return ""


def split_http_url(value: str) -> urllib.parse.SplitResult:
    """``value`` (``HOST:PORT`` or ``http(s)://HOST:PORT/PATH``) parsed; ValueError with the reason."""
    url = value.strip()
    if len(url) > MAX_URL:
        raise ValueError(f"the address has {len(url):,} characters (at most {MAX_URL:,})")
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises for a port out of range or not a number
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"the scheme is {parts.scheme!r}; expected http:// or https://")
    if not parts.hostname:
        raise ValueError("no host name")
    if port == 0:
        raise ValueError("port 0; expected 1 to 65535")
    problem = host_problem(parts.hostname)
    if problem:
        raise ValueError(problem)
    return parts


def check_url(field: str, value: str, what: str) -> str:
    """``value`` checked as an http(s) address (see :func:`split_http_url`); one-line InputError if not.

    ``what`` says what the address should be, e.g. "a vLLM or SGLang server, e.g. localhost:8000"."""
    try:
        split_http_url(value)
    except ValueError as exc:
        raise InputError(field, value, f"expected the address of {what}: {exc}") from None
    return value
