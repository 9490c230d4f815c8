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
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kvdash import __version__
from kvdash.errors import InputError

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


# --- leftovers of killed runs -------------------------------------------------------------------

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


def clean_leftovers(out: Path) -> list[Path]:
    """Delete hidden work folders of earlier runs for ``out`` whose process has ended.

    Ours are ``.NAME.kvdash-tmp-PID-*`` and ``.NAME.kvdash-old-PID-*``; kvdash 0.1 left
    ``.NAME.tmp-XXXXXXXX`` and ``.NAME.old-PID``, removed only when they hold nothing but report files."""
    out = Path(os.path.abspath(out))
    name = re.escape(out.name)
    ours = re.compile(rf"^\.{name}\.kvdash-(?:tmp|old)-(\d+)-[A-Za-z0-9_]+$")
    legacy = re.compile(rf"^\.{name}\.(?:tmp-[A-Za-z0-9_]{{8}}|old-(\d+))$")
    removed = []
    try:
        entries = os.listdir(out.parent)
    except OSError:
        return removed
    for entry in entries:
        path = out.parent / entry
        m = ours.match(entry)
        if m is not None:
            if _alive(int(m.group(1))):
                continue
        else:
            m = legacy.match(entry)
            if m is None or (m.group(1) and _alive(int(m.group(1)))) or not _only_report_files(path):
                continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _only_report_files(folder: Path) -> bool:
    try:
        return all(e.endswith(_KNOWN_SUFFIXES) and _is_file(folder / e) for e in os.listdir(folder))
    except OSError:
        return False


def work_folder(out: Path) -> Path:
    """A fresh hidden folder beside ``out`` for the report being written."""
    out = Path(os.path.abspath(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.kvdash-tmp-{os.getpid()}-", dir=out.parent))


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
    """Ctrl-C noted, then raised as KeyboardInterrupt at the next checkpoint the caller runs.

    A KeyboardInterrupt raised while polars runs Python code for a call (it does, e.g. when it builds a
    dtype) makes polars' Rust side panic and print a Rust panic message on stderr; so while the grid is
    evaluated and the report built, the first Ctrl-C only sets a flag that ``checkpoint()`` turns into the
    usual KeyboardInterrupt between steps.  A second Ctrl-C raises at once."""
    import threading

    pending: list[bool] = []

    def checkpoint() -> None:
        if pending:
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield checkpoint
        return

    def noted(signum: int, frame: object) -> None:
        if pending:
            raise KeyboardInterrupt
        pending.append(True)

    previous = signal.signal(signal.SIGINT, noted)
    try:
        yield checkpoint
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _no_interrupt() -> Iterator[None]:
    """Ctrl-C is held back while the report is swapped in (a few renames)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def commit(tmp: Path, target: Plan) -> list[Path]:
    """Put the finished report folder ``tmp`` at ``target.out`` as planned; the report's files."""
    out = target.out
    files = sorted(os.listdir(tmp))
    (tmp / MANIFEST).write_text(manifest_text(files), encoding="utf-8")
    os.chmod(tmp, 0o755)
    written = sorted(out / name for name in [*files, MANIFEST])
    with _no_interrupt():
        if target.mode == "new":
            os.rename(tmp, out)  # replaces an empty folder; fails (nothing lost) if one appeared meanwhile
            return written
        if target.mode == "replace":
            if exchange(tmp, out):
                old = tmp  # the old report now sits in the work folder
            else:
                old = tmp.with_name(tmp.name.replace(".kvdash-tmp-", ".kvdash-old-"))
                os.rename(out, old)
                os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
            return written
        for name in files:  # merge (--force): each file replaced atomically, the manifest last
            os.replace(tmp / name, out / name)
        for name in target.old_files:
            if name not in files and _is_file(out / name):
                os.unlink(out / name)
        os.replace(tmp / MANIFEST, out / MANIFEST)
        shutil.rmtree(tmp, ignore_errors=True)
    return written
