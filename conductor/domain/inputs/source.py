"""Reading one problem file: JSONL (streamed line by line) or a JSON array, maybe gzipped."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from conductor.domain.errors import InputError

_BLANK = object()


class Source:
    """One problem file: JSONL (streamed line by line) or a JSON array (loaded whole), maybe gzipped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stem = _stem(path)
        if path.is_dir():
            raise InputError(f"{path} is a directory, not a problem file")
        if not path.is_file():
            raise InputError(f"no such problem file: {path}")
        try:
            with path.open("rb") as fh:
                self.gzipped = fh.read(2) == b"\x1f\x8b"
            with self._open() as fh:
                head = fh.read(4096)
        except (OSError, EOFError) as exc:
            if not self.gzipped or path.name.endswith(".gz"):
                raise InputError(f"cannot read {path}: {exc}") from exc
            # Not gzip after all, just a first line starting with its magic bytes: read the file
            # as text, so that line is reported and the others are kept.
            self.gzipped = False
            with self._open() as fh:
                head = fh.read(4096)
        self.array: list[Any] | None = None
        if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
            try:
                self.array = self._load_array()
            except InputError:
                if ".jsonl" not in path.name:
                    raise
                # A JSONL file whose first line starts with "[": report that line, keep the rest.
        self.unit = "record" if self.array is not None else "line"

    def _open(self) -> IO[bytes]:
        if self.gzipped:
            return gzip.open(self.path, "rb")  # type: ignore[return-value]  # GzipFile is a binary IO
        return self.path.open("rb")

    def _load_array(self) -> list[Any]:
        try:
            with self._open() as fh:
                data = json.loads(fh.read().decode("utf-8-sig"))
        except (OSError, EOFError) as exc:
            raise InputError(f"cannot read {self.path}: {exc}") from exc
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"{self.path.name} is not a valid JSON array: {exc}") from exc
        if not isinstance(data, list):  # pragma: no cover - "[" prefix guarantees a list or an error
            raise InputError(f"{self.path.name}: expected a JSON array of problems")
        return data

    def records(self, limit: int | None = None) -> Iterator[tuple[int, object]]:
        """(number, decoded JSON value or InputError); blank JSONL lines are skipped but keep their numbers."""
        if self.array is not None:
            yield from enumerate(self.array[:limit] if limit else self.array, start=1)
            return
        try:
            fh = self._open()
        except OSError as exc:  # the file vanished since __init__
            raise InputError(f"cannot read {self.path}: {exc}") from exc
        with fh:
            number = 0
            while limit is None or number < limit:
                number += 1
                try:
                    raw = fh.readline()
                except (OSError, EOFError) as exc:
                    # A truncated or corrupt gzip stream: report where it broke, then stop.
                    yield number, InputError(f"line {number}: file is corrupt or truncated here ({exc})")
                    return
                if not raw:
                    return
                value = _decode_line(raw, number)
                if value is not _BLANK:
                    yield number, value


def _decode_line(raw: bytes, number: int) -> object:
    try:
        text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        return InputError(f"line {number}: not valid UTF-8 ({exc.reason} at byte {exc.start})")
    if not text.strip():
        return _BLANK
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return InputError(f"line {number}: invalid JSON: {exc.msg} (column {exc.colno})")
    except RecursionError:
        return InputError(f"line {number}: invalid JSON: nested too deeply")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name or "problems"
