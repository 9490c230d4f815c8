"""The report folder: what ``--out`` may replace, and a swap that never leaves it half-written.

A report folder kvdash wrote holds ``kvdash-manifest.json``: the kvdash version and the names of the
files it wrote, nothing else (no time, no path), so a committed report stays byte-identical when it is
regenerated.  ``--out DIR`` may be:

* missing, or an empty folder: the report is renamed into place;
* a folder whose manifest lists every file in it: the new report replaces it whole;
* anything else (a file, a link, a folder with files kvdash did not write) is refused with one line,
  exit 2.  With ``--force`` a folder is written into instead: each file of the new report replaces the
  file of that name, files of the old manifest that the new report no longer has are removed, and no
  other file is touched.  A file or a link at ``--out`` is refused even with ``--force``.

Every report is first written into a fresh hidden folder beside ``--out``
(``.NAME.kvdash-tmp-PID-XXXX``).  On Linux the two folders are then exchanged in one step with
``renameat2(RENAME_EXCHANGE)`` (Linux 3.15+, glibc 2.28+; ext4, xfs, btrfs, tmpfs), so there is no moment
without a complete report at ``--out``; where the call is missing or the file system refuses it, the old
folder is renamed aside and the new one renamed in (two renames: for a moment ``--out`` does not exist).
The old report is deleted afterwards.  A run killed before that leaves a hidden folder; the next run
for the same ``--out`` deletes it once the process that made it has ended.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import signal
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kvdash import __version__
from kvdash.errors import InputError
from kvdash.interrupts import _raise_for, _signals, terminate_like_interrupt  # noqa: F401 - the sweep imports it here

MANIFEST = "kvdash-manifest.json"
MANIFEST_CAP = 2**20
_OUTPUT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_KNOWN_SUFFIXES = (".csv", ".md", ".html", ".svg", ".parquet", ".json")


def manifest_text(files: list[str]) -> str:
    """The manifest of a report folder: deterministic (sorted names, the version, no time)."""
    return json.dumps({"kvdash": __version__, "files": sorted(files)}, indent=1) + "\n"


def read_manifest(folder: Path) -> list[str] | None:
    """The file names a folder's manifest lists, or None when it has no valid manifest."""
    from kvdash import safeio

    try:
        data = json.loads(safeio.read_text(folder / MANIFEST, "manifest", MANIFEST_CAP))
    except (InputError, ValueError, RecursionError):
        return None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) and _OUTPUT_NAME.match(f) for f in files):
        return None
    return [str(f) for f in files]


@dataclass
class Plan:
    """What writing to ``out`` will do: ``new`` (missing or empty), ``replace`` (a kvdash folder, swapped
    whole) or ``merge`` (--force: kvdash's files replaced one by one, others left alone)."""

    out: Path
    mode: str
    old_files: list[str] = field(default_factory=list)


def _refuse(out: Path, why: str) -> InputError:
    return InputError("--out", str(out), why)


def plan(out: Path, force: bool = False) -> Plan:
    """Decide what may happen at ``out``; refuse (one line, exit 2) what would lose data."""
    out = Path(os.path.abspath(out))
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return Plan(out, "new")
    except OSError as exc:
        raise _refuse(out, f"cannot be inspected ({exc.strerror})") from exc
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(out, "is a symbolic link; give the folder itself (kvdash never replaces a link)")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(out, "is a file, not a folder; kvdash writes a report folder and never replaces a file "
                           "(not even with --force)")
    try:
        entries = sorted(os.listdir(out))
    except OSError as exc:
        raise _refuse(out, f"cannot be listed ({exc.strerror})") from exc
    if not entries:
        return Plan(out, "new")
    listed = read_manifest(out) if MANIFEST in entries else None
    if listed is not None:
        others = [e for e in entries if e != MANIFEST and (e not in listed or not _is_file(out / e))]
        if not others:
            return Plan(out, "replace", listed)
    else:
        others = [e for e in entries if e != MANIFEST]
    if force:
        return Plan(out, "merge", listed or [])
    shown = ", ".join(others[:3]) + (f" and {len(others) - 3:,} more" if len(others) > 3 else "")
    what = f"holds {shown}, which kvdash did not write" if listed is not None else \
        f"is not a report folder kvdash wrote (no valid {MANIFEST}; it holds {shown})"
    raise _refuse(out, f"{what}; choose another --out or an empty folder, or add --force to replace only the "
                       "files of the report and leave every other file alone")


def _is_file(p: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(p).st_mode)
    except OSError:
        return False


# --- work folders and the leftovers of killed runs -------------------------------------------------

WORK_MARKER = "kvdash-work.json"  # in a work folder, beside its report/ folder
WORK_REPORT = "report"  # the report being written, inside the work folder
WORK_PREVIOUS = "previous"  # the replaced report, where the folders cannot be exchanged in one step
_MARKER_KIND = "kvdash sweep work folder"
_MARKER_CAP = 4096
_WORK_NAME = re.compile(r"^\..+\.kvdash-(?:tmp|old)-(\d{1,10})-([0-9a-f]{16})$")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's live process (or an impossible pid): leave it
    return True


def work_folder(out: Path) -> Path:
    """A fresh hidden folder beside ``out``, ``.NAME.kvdash-tmp-PID-TOKEN``, marked as kvdash's own: it holds
    ``kvdash-work.json`` (the PID and the token of its name) and ``report/``, where the report is written;
    the report path is returned.  Cleanup removes only folders with a valid marker (:func:`clean_leftovers`)."""
    import secrets

    out = Path(os.path.abspath(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:
        token = secrets.token_hex(8)
        folder = out.parent / f".{out.name}.kvdash-tmp-{os.getpid()}-{token}"
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # pragma: no cover - 2^64 tokens
            continue
        break
    marker = json.dumps({"kind": _MARKER_KIND, "pid": os.getpid(), "token": token}) + "\n"
    try:
        fd = os.open(folder / WORK_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, marker.encode("ascii"))
        finally:
            os.close(fd)
        os.mkdir(folder / WORK_REPORT, 0o700)
    except BaseException:
        remove_work(folder)
        raise
    return folder / WORK_REPORT


def _marker_ok(folder: Path, pid: int, token: str) -> bool:
    """True when ``folder`` holds a marker kvdash wrote for this PID and token (a regular file, small, exact)."""
    path = folder / WORK_MARKER
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MARKER_CAP:
            return False
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("kind") == _MARKER_KIND and data.get("pid") == pid \
        and data.get("token") == token


def _is_report_file(folder: Path, name: str) -> bool:
    return (name == MANIFEST or (_OUTPUT_NAME.match(name) is not None and name.endswith(_KNOWN_SUFFIXES))) \
        and _is_file(folder / name)


def remove_work(folder: Path) -> bool:
    """Remove a work folder's own files: its marker, and in ``report/`` only files named like a report's
    (``*.csv``, ``*.md``, ``*.html``, ``*.svg``, ``*.parquet``, ``*.json``, regular files; also in
    ``previous/``, the replaced report).  Anything else
    (a file someone put there) stays, and so do the folders holding it.  True when the folder is gone."""
    for sub in (WORK_REPORT, WORK_PREVIOUS):
        report = folder / sub
        try:
            if stat.S_ISDIR(os.lstat(report).st_mode):
                for name in os.listdir(report):
                    if _is_report_file(report, name):
                        os.unlink(report / name)
                os.rmdir(report)
        except OSError:
            pass
    try:
        if _is_file(folder / WORK_MARKER):
            os.unlink(folder / WORK_MARKER)
        os.rmdir(folder)
    except OSError:
        return False
    return True


def work_root(report: Path) -> Path:
    """The marked work folder of a report being written (see :func:`work_folder`)."""
    return report.parent


def clean_leftovers(out: Path) -> list[Path]:
    """Remove the work folders that killed kvdash runs left in ``out``'s parent folder (for any ``--out``
    there): hidden folders named ``.NAME.kvdash-tmp-PID-TOKEN`` or ``.NAME.kvdash-old-PID-TOKEN`` that hold
    a valid ``kvdash-work.json`` for that PID and token, whose process has ended.  Only kvdash's own files
    are removed (:func:`remove_work`).  A folder without the marker is never touched, whatever its name
    (kvdash 0.1's ``.NAME.tmp-*`` and ``.NAME.old-*`` included: remove those by hand)."""
    parent = Path(os.path.abspath(out)).parent
    removed = []
    try:
        entries = os.listdir(parent)
    except OSError:
        return removed
    for entry in entries:
        m = _WORK_NAME.match(entry)
        if m is None:
            continue
        path = parent / entry
        pid, token = int(m.group(1)), m.group(2)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                continue
        except OSError:
            continue
        if _alive(pid) or not _marker_ok(path, pid, token):
            continue
        if remove_work(path):
            removed.append(path)
    return removed


# --- the swap -----------------------------------------------------------------------------------

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # glibc before 2.28, musl
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False  # the kernel or file system cannot exchange
    raise OSError(err, os.strerror(err), str(b))


@contextmanager
def deferred_interrupt() -> Iterator[Callable[[], None]]:
    """Ctrl-C (SIGTERM, SIGHUP) noted, then raised as KeyboardInterrupt (:class:`~kvdash.errors.Terminated`)
    at the next checkpoint the caller runs.

    A KeyboardInterrupt raised while polars runs Python code for a call (it does, e.g. when it builds a
    dtype) makes polars' Rust side panic and print a Rust panic message on stderr; so while the grid is
    evaluated and the report built, the first signal only sets a flag that ``checkpoint()`` turns into the
    usual exception between steps.  A second one raises at once."""
    import threading

    pending: list[int] = []

    def checkpoint() -> None:
        if pending:
            _raise_for(pending[0])

    if threading.current_thread() is not threading.main_thread():
        yield checkpoint
        return

    def noted(signum: int, frame: object) -> None:
        if pending:
            _raise_for(pending[0])
        pending.append(signum)

    from kvdash import interrupts

    previous = {s: signal.signal(s, noted) for s in _signals()}
    interrupts.push_checkpoint(checkpoint)  # kvdash.interrupts.checkpoint() raises a noted one from deeper code
    try:
        yield checkpoint
    finally:
        interrupts.pop_checkpoint()
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def _no_interrupt() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP are ignored while the report is swapped in (a few renames): the run then
    ends as it would have a moment later, with the new report in place."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in _signals()}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def commit(tmp: Path, target: Plan) -> list[Path]:
    """Put the finished report folder ``tmp`` (from :func:`work_folder`) at ``target.out`` as planned; the
    report's files.  The marked work folder around it is removed afterwards, with the old report."""
    out = target.out
    root = work_root(tmp)
    files = sorted(os.listdir(tmp))
    (tmp / MANIFEST).write_text(manifest_text(files), encoding="utf-8")
    os.chmod(tmp, 0o755)
    written = sorted(out / name for name in [*files, MANIFEST])
    with _no_interrupt():
        if target.mode == "new":
            os.rename(tmp, out)  # replaces an empty folder; fails (nothing lost) if one appeared meanwhile
        elif target.mode == "replace":
            if not exchange(tmp, out):  # the old report now sits in the work folder's report/ ...
                os.rename(out, root / WORK_PREVIOUS)  # ... or, with two renames, in its previous/
                os.rename(tmp, out)
        else:
            for name in files:  # merge (--force): each file replaced atomically, the manifest last
                os.replace(tmp / name, out / name)
            for name in target.old_files:
                if name not in files and _is_file(out / name):
                    os.unlink(out / name)
            os.replace(tmp / MANIFEST, out / MANIFEST)
        remove_work(root)
    return written
