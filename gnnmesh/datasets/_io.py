"""Reading the raw bytes of data files, turning every OS/compression failure into a
GraphError that names the file (and the archive member, for zips)."""

from __future__ import annotations

import gzip
import os
import zipfile
import zlib
from pathlib import Path

from ..errors import GraphError

GZIP_MAGIC = b"\x1f\x8b"


def _os_error(path, exc: OSError) -> GraphError:
    if isinstance(exc, FileNotFoundError):
        return GraphError(f"{path}: file not found")
    if isinstance(exc, PermissionError):
        return GraphError(f"{path}: permission denied")
    if isinstance(exc, IsADirectoryError):
        return GraphError(f"{path}: is a directory, expected a file")
    return GraphError(f"{path}: cannot read file ({exc.strerror or exc})")


def read_raw(path) -> bytes:
    """The file's bytes exactly as stored."""
    path = Path(path)
    if path.is_dir():  # open() on a directory gives a platform-dependent error; say it plainly
        raise GraphError(f"{path}: is a directory, expected a file")
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise _os_error(path, exc) from exc


def gunzip(raw: bytes, source) -> bytes:
    try:
        return gzip.decompress(raw)
    except EOFError as exc:
        raise GraphError(f"{source}: truncated gzip data (compressed stream ends early)") from exc
    except (OSError, zlib.error) as exc:  # BadGzipFile is an OSError
        raise GraphError(f"{source}: corrupt gzip data ({exc})") from exc


def read_bytes(path) -> bytes:
    """The file's content, gunzipped when it is gzip data (recognised by its magic bytes,
    so a mis-named file still reads; a '.gz' file that is not gzip is an error)."""
    raw = read_raw(path)
    if raw[:2] == GZIP_MAGIC:
        return gunzip(raw, path)
    if str(path).endswith(".gz"):
        raise GraphError(f"{path}: not gzip data despite the .gz suffix")
    return raw


def read_zip_member(path, member: str) -> bytes:
    """One member of a zip archive; errors name ``archive:member``."""
    path = Path(path)
    if path.is_dir():
        raise GraphError(f"{path}: is a directory, expected a zip file")
    where = f"{path}:{member}"
    try:
        with zipfile.ZipFile(path) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise GraphError(f"{path}: archive has no member '{member}'") from None
            return zf.read(info)
    except OSError as exc:
        raise _os_error(path, exc) from exc
    except zipfile.BadZipFile as exc:  # also raised for a member whose CRC does not match
        raise GraphError(f"{where}: corrupt or truncated zip archive ({exc})") from exc
    except (EOFError, zlib.error) as exc:
        raise GraphError(f"{where}: truncated or corrupt zip member ({exc})") from exc


def decode_text(data: bytes, source) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise GraphError(f"{source} line {line}: not valid UTF-8 text") from exc


def file_stat(path) -> list:
    """(path, size, mtime_ns) for cache keys: a changed source file invalidates the cache."""
    st = os.stat(path)
    return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]
