"""The labelling page in headless Chromium: real keystrokes through the DevTools protocol, real
server, the answers read back from the label file."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest

from pairsieve.labels import serve, store
from tests.unit.report.test_stage import CHROMIUM, CHROMIUM_FLAGS

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Chromium absent: `apt-get install chromium` (make test does it)",
    ),
]

TITLES = [
    ("Apple iPhone 8 64GB Silver", "apple iphone 8 64 gb silver"),
    ("Samsung Galaxy S9 64GB", "Samsung Galaxy S9 256GB"),
    ("Bosch Serie 4 WAN28081GB", "Bosch WAN28081GB washing machine"),
    ("Sony KD-55XF9005", "Sony KD-65XF9005"),
]


def _label_file(path: Path) -> Path:
    rows = pl.DataFrame(
        {
            "pair_id": [f"c{i}" for i in range(len(TITLES))],
            "listing_a": [f"a{i}" for i in range(len(TITLES))],
            "listing_b": [f"b{i}" for i in range(len(TITLES))],
            "text_a": [a for a, _ in TITLES],
            "text_b": [b for _, b in TITLES],
            "p_same": [0.9, 0.4, 0.6, 0.2],
            "stratum": [6, 3, 4, 2],
            "weight": [1.0] * len(TITLES),
            "source": ["candidate"] * len(TITLES),
            "label": [None] * len(TITLES),
        },
        schema=store.SCHEMA,
    )
    return store.write_labels(rows, path)


class Page:
    """One Chromium tab driven over the DevTools websocket."""

    def __init__(self, url: str, profile: Path) -> None:
        from websockets.sync.client import connect

        self.proc = subprocess.Popen(
            [
                str(CHROMIUM),
                *CHROMIUM_FLAGS,
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.time() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert time.time() < deadline, "Chromium did not open its DevTools port"
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json").read())
        page = next(t for t in targets if t["type"] == "page")
        self.socket = connect(page["webSocketDebuggerUrl"], max_size=None)
        self.next_id = 0

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.socket.recv(timeout=30))
            if reply.get("id") == self.next_id:
                return reply.get("result", {})

    def value(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression)["result"].get("value")

    def wait_for(self, expression: str, expected, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while self.value(expression) != expected:
            assert time.time() < deadline, f"{expression} never became {expected!r}"
            time.sleep(0.1)

    def press(self, keys: str) -> None:
        for key in keys:
            self.call("Input.dispatchKeyEvent", type="keyDown", key=key, text=key)
            self.call("Input.dispatchKeyEvent", type="keyUp", key=key)

    def close(self) -> None:
        self.socket.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def test_keystrokes_become_labels_in_the_file_and_a_reopened_page_resumes(tmp_path):
    path = _label_file(tmp_path / "labels.jsonl")
    httpd = serve.server(path)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    page = Page(url, tmp_path / "profile")
    try:
        page.wait_for("document.body.dataset.ready", "1")
        assert "<mark>" in page.value("document.getElementById('a').innerHTML")  # a difference
        # y, n, skip, undo the skip, n, y, then undo the last answer
        page.press("ynsuny")
        page.wait_for("document.body.dataset.saved", "5")
        assert page.value("document.getElementById('done') !== null") is True
        assert store.read_labels(path)["label"].to_list() == [True, False, False, True]
        page.press("u")
        page.wait_for("document.body.dataset.saved", "6")
        assert store.read_labels(path)["label"].to_list() == [True, False, False, None]
        assert page.value("document.getElementById('progress').textContent") == "3 of 4 answered"
    finally:
        page.close()
    state = json.loads(urllib.request.urlopen(url + "pairs").read())
    assert state["start"] == 3  # a new page opens after the last answer
    httpd.shutdown()
