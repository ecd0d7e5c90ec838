"""The persistent compile cache: verified, atomically written entries on disk.

``--tfjit_persistent_cache_directory`` / ``TFJIT_CACHE_DIR`` (off when empty)
names a directory of entries, one file per key.  This module stores opaque
payloads; what a key covers and what a payload holds is the caller's business
(``codegen/objcache.py`` keys machine code by its LLVM IR, the tfjit and LLVM
versions and the host CPU).  It lives in ``runtime/`` and imports no compiler
so a deployed artefact could read the same cache.

Entry file ``<key hex>.tfjit``::

    magic    8 bytes   b"TFJITC\\0\\1"
    version  u32       FORMAT_VERSION
    key      32 bytes  the sha256 the entry was written under
    length   u64       payload bytes that follow the header
    digest   32 bytes  sha256 of the payload
    payload

A reader checks every field against what it expects (the file's size
included) and treats any mismatch as a miss: the entry is deleted with a
warning and the caller recompiles, so a truncated, corrupted or stale entry is
never loaded.  Writers write a private temporary file in the same directory
and ``os.replace`` it over the entry, so readers in other processes see the
old entry, the new one, or none, never half of one.

The directory is created with mode 0700.  A directory that others could write
into (group- or world-writable) or that belongs to another user is refused with a
warning and the cache is off: another user could plant machine code there
that this process would run.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import stat
import struct
import tempfile
import threading

from tfjit import settings

log = logging.getLogger("tfjit")

MAGIC = b"TFJITC\0\1"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sI32sQ32s")
SUFFIX = ".tfjit"


@dataclasses.dataclass
class Stats:
    """Counters of one cache directory in this process (what tests and tools read)."""
    hits: int = 0
    misses: int = 0          # no entry for the key
    rejected: int = 0        # an entry was there but failed verification (deleted)
    writes: int = 0
    write_errors: int = 0


def pack(key: bytes, payload: bytes, version: int = FORMAT_VERSION) -> bytes:
    """One entry file's bytes (``version`` is a parameter only so tests can write stale ones)."""
    return _HEADER.pack(MAGIC, version, key, len(payload), hashlib.sha256(payload).digest()) + payload


def unpack(key: bytes, data: bytes) -> bytes:
    """The payload of an entry written under ``key``; ValueError saying what is wrong otherwise."""
    if len(data) < _HEADER.size:
        raise ValueError(f"truncated header ({len(data)} of {_HEADER.size} bytes)")
    magic, version, entry_key, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("bad magic")
    if version != FORMAT_VERSION:
        raise ValueError(f"format version {version}, expected {FORMAT_VERSION}")
    if entry_key != key:
        raise ValueError("written under another key")
    payload = data[_HEADER.size:]
    if len(payload) != length:
        raise ValueError(f"payload is {len(payload)} bytes, header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("payload checksum mismatch")
    return payload


class DiskCache:
    """Entries under one directory (already checked by ``open_directory``)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.stats = Stats()
        self._lock = threading.Lock()    # the counters; files are safe by os.replace

    def path(self, key: bytes) -> str:
        return os.path.join(self.directory, key.hex() + SUFFIX)

    def get(self, key: bytes) -> bytes | None:
        """The verified payload stored under ``key``, or None (a miss)."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            self._count("misses")
            return None
        except OSError as e:
            log.warning("tfjit: persistent cache: cannot read %s (%s); recompiling", path, e)
            self._count("misses")
            return None
        try:
            payload = unpack(key, data)
        except ValueError as e:
            self.reject(key, str(e))
            return None
        log.debug("tfjit: persistent cache: hit %s", path)
        self._count("hits")
        return payload

    def reject(self, key: bytes, reason: str) -> None:
        """Drops a bad entry (also for callers whose payload check failed)."""
        path = self.path(key)
        log.warning("tfjit: persistent cache: discarding %s (%s); recompiling", path, reason)
        self._count("rejected")
        try:
            os.unlink(path)
        except OSError:
            pass            # already replaced or removed by another process; still a miss

    def put(self, key: bytes, payload: bytes) -> None:
        """Stores ``payload`` atomically; a failure is logged, never raised (the cache is
        an optimisation, a full disk must not fail a compile)."""
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.directory)
            with os.fdopen(fd, "wb") as f:     # mkstemp creates the file 0600
                f.write(pack(key, payload))
            os.replace(tmp, self.path(key))
            tmp = None
            log.debug("tfjit: persistent cache: wrote %s", self.path(key))
            self._count("writes")
        except OSError as e:
            log.warning("tfjit: persistent cache: cannot write to %s (%s)", self.directory, e)
            self._count("write_errors")
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)


def check_directory(directory: str) -> str | None:
    """Creates ``directory`` (mode 0700) if needed; returns why it must not be used, or None."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.stat(directory)
    except OSError as e:
        return f"cannot create it ({e})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
        who = "world" if st.st_mode & stat.S_IWOTH else "group"
        return f"it is {who}-writable (mode {stat.S_IMODE(st.st_mode):o})"
    return None


_caches: dict = {}               # directory -> DiskCache, or None once refused
_caches_lock = threading.Lock()


def open_directory(directory: str) -> DiskCache | None:
    """The cache for ``directory``, or None (with one warning) when it is refused."""
    directory = os.path.abspath(os.path.expanduser(directory))
    with _caches_lock:
        if directory not in _caches:
            reason = check_directory(directory)
            if reason is not None:
                log.warning("tfjit: persistent compile cache disabled: refusing %s: %s",
                            directory, reason)
            _caches[directory] = None if reason else DiskCache(directory)
        return _caches[directory]


def active() -> DiskCache | None:
    """The cache the flags ask for, or None when it is off or refused."""
    directory = settings.flags().tfjit_persistent_cache_directory
    return open_directory(directory) if directory else None
