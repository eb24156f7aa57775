"""The labelling page: two titles side by side, one key per answer, every answer written back
to the label file at once.

Keys: y = same product, n = different, s = skip (left unanswered), u = undo (back one pair, its
answer cleared). The page opens after the last answered pair, so a person who stops resumes
where the file left off. The server listens on 127.0.0.1 only: the labels are the user's data.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl

from pairsieve.errors import PairsieveError
from pairsieve.labels.store import read_labels, write_labels

PAGE = Path(__file__).with_name("page.html")


class LabelFile:
    """The label file held in memory; each answer rewrites it atomically."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.rows = read_labels(self.path)
        self.lock = threading.Lock()

    def state(self) -> dict:
        """The pairs to show (id, texts, answer) and where to start: after the last answer."""
        labels = self.rows["label"].to_list()
        answered = [i for i, v in enumerate(labels) if v is not None]
        start = answered[-1] + 1 if answered else 0
        if start >= len(labels):
            start = next((i for i, v in enumerate(labels) if v is None), len(labels))
        pairs = self.rows.select("pair_id", "text_a", "text_b", "p_same", "label").to_dicts()
        return {"pairs": pairs, "start": start, "file": str(self.path)}

    def answer(self, pair_id: str, label: bool | None) -> dict:
        """Store ``label`` (None clears it) for ``pair_id``; returns the answered count.

        Raises:
            PairsieveError: ``bad_labels`` for an unknown pair or a label that is not a bool.
        """
        if label not in (None, True, False):
            raise PairsieveError("bad_labels", f"label must be true, false or null: {label!r}")
        with self.lock:
            hit = self.rows["pair_id"] == pair_id
            if not hit.any():
                raise PairsieveError("bad_labels", f"unknown pair_id {pair_id!r}")
            value = pl.lit(label, dtype=pl.Boolean)
            self.rows = self.rows.with_columns(
                pl.when(hit).then(value).otherwise(pl.col("label")).alias("label")
            )
            write_labels(self.rows, self.path)
            return {"answered": int(self.rows["label"].is_not_null().sum())}


def handler_for(labels: LabelFile) -> type[BaseHTTPRequestHandler]:
    """A request handler serving the page, the pairs (GET /pairs) and answers (POST /label)."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj: dict) -> None:
            self._send(status, json.dumps(obj).encode(), "application/json")

        def do_GET(self) -> None:  # noqa: N802 - the http.server protocol
            if self.path == "/":
                self._send(200, PAGE.read_bytes(), "text/html; charset=utf-8")
            elif self.path == "/pairs":
                self._json(200, labels.state())
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802 - the http.server protocol
            if self.path != "/label":
                self._json(404, {"error": "not found"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                self._json(200, labels.answer(body.get("pair_id"), body.get("label")))
            except (PairsieveError, json.JSONDecodeError, AttributeError) as err:
                self._json(400, {"error": str(err)})

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Quiet: one line per answer would bury the terminal."""

    return Handler


def server(path: str | Path, port: int = 0) -> ThreadingHTTPServer:
    """A labelling server for the label file ``path`` on 127.0.0.1 (port 0: any free one);
    the caller runs ``serve_forever``."""
    return ThreadingHTTPServer(("127.0.0.1", port), handler_for(LabelFile(path)))
