"""Bounded reads of user files: regular files only, a size cap per kind, never a blocking open.

Every file kvdash reads on a user's behalf (grid files, ``config.json``, ``model.safetensors.index.json``,
replays, traces, the ``results.csv`` of ``kvdash diff``) goes through this module:

* ``os.stat`` first: a folder, FIFO, socket or device (``/dev/zero``, ``/dev/urandom``) is refused at
  once with one line, before any ``open``;
* the file is opened with ``O_NONBLOCK`` (a FIFO swapped in after the check cannot block the open) and
  ``fstat`` checks again that the opened file is a regular one;
* at most ``cap + 1`` bytes are read: a larger file is refused, naming the cap and how to raise it.

Caps (bytes; documented in docs/safety.md):

* ``CONFIG_CAP`` = 16 MiB for YAML and JSON documents (grid files, ``config.json``, safetensors indexes;
  the largest published ``model.safetensors.index.json`` files are a few MiB);
* ``STREAM_CAP`` = 256 MiB by default for traces and replays, read line by line (``--max-file-size``
  raises it), with ``LINE_CAP`` = 1 MiB per line;
* ``TABLE_CAP`` = 4 GiB for a ``results.csv`` given to ``kvdash diff``.

No heavy imports: this module is imported by every command.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from kvdash.errors import InputError

MiB = 2**20
CONFIG_CAP = 16 * MiB
STREAM_CAP = 256 * MiB
LINE_CAP = MiB
TABLE_CAP = 4 * 2**30


def _size_text(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", MiB), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size:,} {unit}"
    return f"{n:,} bytes"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path: str | Path, field: str, cap: int, raise_with: str = "") -> int:
    """The size of ``path`` if it is a regular file of at most ``cap`` bytes; else one-line InputError."""
    name = str(path)
    try:
        st = os.stat(name)
    except FileNotFoundError as exc:
        raise InputError(field, name, "the file does not exist") from exc
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise InputError(field, name, f"the file cannot be read ({reason})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise InputError(field, name, f"{_kind(st.st_mode)}; expected a regular file")
    if st.st_size > cap:
        raise InputError(field, name, _too_big(st.st_size, cap, raise_with))
    return st.st_size


def _too_big(size: int, cap: int, raise_with: str) -> str:
    more = f"; raise it with {raise_with}" if raise_with else ""
    return f"the file is {size:,} bytes, over the {_size_text(cap)} limit{more}"


def open_fd(path: str | Path, field: str, cap: int, raise_with: str) -> int:
    check_regular(path, field, cap, raise_with)
    name = str(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(field, name, f"the file cannot be read ({exc.strerror or type(exc).__name__})") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped between stat and open
        os.close(fd)
        raise InputError(field, name, f"{_kind(st.st_mode)}; expected a regular file")
    os.set_blocking(fd, True)
    return fd


def read_bytes(path: str | Path, field: str, cap: int = CONFIG_CAP, raise_with: str = "") -> bytes:
    """At most ``cap`` bytes of a regular file (a longer file is an error, not a truncation)."""
    fd = open_fd(path, field, cap, raise_with)
    chunks: list[bytes] = []
    total = 0
    try:
        while total <= cap:
            chunk = os.read(fd, min(MiB, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise InputError(field, str(path), f"the file cannot be read ({exc.strerror})") from exc
    finally:
        os.close(fd)
    if total > cap:  # the file grew after the stat
        raise InputError(field, str(path), _too_big(total, cap, raise_with))
    return b"".join(chunks)


def read_text(path: str | Path, field: str, cap: int = CONFIG_CAP, raise_with: str = "") -> str:
    """A regular file of at most ``cap`` bytes as UTF-8 text without NUL characters."""
    return decode(read_bytes(path, field, cap, raise_with), field, str(path))


def decode(data: bytes, field: str, name: str, line: int | None = None) -> str:
    """UTF-8 text, or one line naming where the first bad byte is."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = f"line {line}, " if line is not None else ""
        raise InputError(field, name, f"not UTF-8 text ({at}byte {exc.start:,}: {data[exc.start:exc.start + 1]!r})"
                         ) from exc
    nul = text.find("\0")
    if nul >= 0:
        where = f"line {line}" if line is not None else f"line {text.count(chr(10), 0, nul) + 1}"
        raise InputError(field, name, f"a NUL character at {where}; expected text")
    return text


def iter_lines(path: str | Path, field: str, cap: int = STREAM_CAP, raise_with: str = "",
               line_cap: int = LINE_CAP) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a regular file, streamed: at most ``cap`` bytes in all and
    ``line_cap`` bytes per line, so memory stays bounded whatever the file holds."""
    fd = open_fd(path, field, cap, raise_with)
    name = str(path)
    total = 0
    try:
        with os.fdopen(fd, "rb", closefd=True) as fh:
            for number, raw in enumerate(iter(lambda: fh.readline(line_cap + 1), b""), 1):
                total += len(raw)
                if total > cap:
                    raise InputError(field, name, _too_big(total, cap, raise_with))
                if len(raw) > line_cap and not raw.endswith(b"\n"):
                    raise InputError(field, f"{name}:{number}",
                                     f"the line is longer than {_size_text(line_cap)}")
                yield number, decode(raw, field, name, number).rstrip("\r\n")
    except OSError as exc:
        raise InputError(field, name, f"the file cannot be read ({exc.strerror})") from exc
