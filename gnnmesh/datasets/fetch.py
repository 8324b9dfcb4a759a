"""``gnnmesh datasets --fetch NAME``: download a registered dataset's public upstream files
(see ``upstream.py``) into a data root, in the layout the loaders read.

Every file is streamed into a temporary beside its target and checked against its pinned
sha256; the temporaries are renamed into place only once every file of the dataset has
verified. On any failure they are removed, with the folders the fetch created, so a data
root never holds part of a dataset because of a fetch. Plain-text files upstream are
stored gzip-compressed, as the loaders expect them.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import sys
import urllib.error
import urllib.request
from contextlib import ExitStack, nullcontext
from pathlib import Path

from ..atomic import atomic_file
from ..errors import ConfigError, GraphError
from .registry import _data_root, _lookup, names
from .upstream import UPSTREAM, UpstreamFile

CHUNK_BYTES = 1 << 16
TIMEOUT_S = 60


class FetchError(GraphError):
    """A download failed (network, HTTP status, truncated transfer or checksum). The message
    names the file and its URL."""


def fetch(name: str, root=None, progress=None) -> str:
    """Download dataset ``name`` into ``root`` (default ``$GNNMESH_DATA``) and return a
    one-line summary. ``progress``: where to report each file (default stderr)."""
    dataset = _lookup(name)
    if dataset is None:
        raise GraphError(f"unknown dataset '{name}'; known datasets: {', '.join(names())}")
    upstream = UPSTREAM.get(dataset.name)
    if upstream is None:
        raise GraphError(f"dataset '{dataset.name}' is generated: there is nothing to fetch")
    base = _data_root(root)
    if base is None:
        raise ConfigError(f"--fetch {dataset.name}: no data root: pass --data-root DIR or set "
                          f"GNNMESH_DATA")
    if base.exists() and not base.is_dir():
        raise ConfigError(f"data root {base} is not a directory")
    report = Progress(sys.stderr if progress is None else progress)
    created = _missing_folders(base, upstream.files)
    try:
        with ExitStack() as staged:  # every temporary renamed into place on a clean exit only
            for file in upstream.files:
                _download(file, staged.enter_context(atomic_file(base / file.path)), report)
    except BaseException:
        for folder in created:  # deepest first; only the empty ones this fetch made
            _remove_if_empty(folder)
        raise
    total = sum(report.sizes)
    summary = f"{dataset.name}: {len(upstream.files)} files ({total:,} bytes) verified, stored under {base}"
    return summary + (f"; PARTIAL: {upstream.partial}" if upstream.partial else "")


def _missing_folders(base: Path, files) -> list:
    """The folders the dataset's files need that do not exist yet, deepest first."""
    missing = set()
    for file in files:
        folder = (base / file.path).parent
        while not folder.exists():
            missing.add(folder)
            folder = folder.parent
    return sorted(missing, key=lambda p: len(p.parts), reverse=True)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:  # not empty: something else put a file there meanwhile
        pass


def _download(file: UpstreamFile, out, report: "Progress") -> None:
    """Stream ``file`` into ``out`` (gzip-compressed when the data root keeps it so),
    checking its sha256 against the pinned one."""
    url = file.url()
    digest = hashlib.sha256()
    compress = gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) if file.gzip \
        else nullcontext(out)
    size = 0
    with compress as sink:
        for chunk, size, length in _stream(file, url):
            digest.update(chunk)
            sink.write(chunk)
            report.bytes(file.path, size, length)
    if digest.hexdigest() != file.sha256:
        raise FetchError(f"{file.path}: checksum mismatch, sha256 {digest.hexdigest()} instead "
                         f"of {file.sha256} ({url})")
    report.done(file.path, size)


def _stream(file: UpstreamFile, url: str):
    """Yield (chunk, bytes so far, Content-Length or None); network failures, HTTP errors
    and a body shorter than its Content-Length raise FetchError."""
    def failed(problem):
        return FetchError(f"{file.path}: {problem} ({url})")

    try:
        response = urllib.request.urlopen(url, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as err:
        raise failed(f"HTTP {err.code} {err.reason}") from None
    except urllib.error.URLError as err:
        raise failed(f"cannot download: {err.reason}") from None
    except (OSError, http.client.HTTPException) as err:
        raise failed(f"cannot download: {err}") from None
    with response:
        header = response.headers.get("Content-Length", "")
        length = int(header) if header.isdigit() else None
        received, cut_short = 0, False
        while True:
            try:
                chunk = response.read(CHUNK_BYTES)
            except http.client.IncompleteRead as err:  # the connection closed early
                received, cut_short = received + len(err.partial), True
                break
            except (OSError, http.client.HTTPException) as err:
                raise failed(f"download interrupted after {received:,} bytes: {err}") from None
            if not chunk:
                break
            received += len(chunk)
            yield chunk, received, length
    if cut_short or (length is not None and received < length):
        expected = f" of {length:,}" if length is not None else ""
        raise failed(f"truncated transfer: {received:,}{expected} bytes")


class Progress:
    """Bytes so far on one updating line when ``stream`` is a terminal; otherwise one plain
    line per verified file."""

    def __init__(self, stream):
        self.stream = stream
        self.live = stream.isatty()
        self.sizes = []

    def bytes(self, path: str, received: int, length) -> None:
        if self.live:
            of = f" of {length:,}" if length is not None else ""
            self.stream.write(f"\r{path}: {received:,}{of} bytes")
            self.stream.flush()

    def done(self, path: str, size: int) -> None:
        self.sizes.append(size)
        start = "\r" if self.live else ""  # over the bytes-so-far line
        self.stream.write(f"{start}{path}: {size:,} bytes, sha256 verified\n")
        self.stream.flush()
