"""Build folders that readers can trust: one writer at a time, atomic publication, verification.

A build never writes into its `--out DIR` directly. It works in a staging folder beside it
(`.DIR.staging`, kept across crashes so a rerun resumes there) and, when every stage is complete,
swaps it with `DIR` in one atomic `renameat2(RENAME_EXCHANGE)`. A trainer reading `DIR/shards/`
therefore sees the previous build or the new one, never a mix. A lock file beside `DIR` held with
`flock` keeps a second build out; the kernel drops the lock when its holder dies, so a killed
run never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from pairsieve.core import io
from pairsieve.core.layout import RunLayout, staging_dir
from pairsieve.errors import PairsieveError
from pairsieve.faults import environment_error
from pairsieve.schemas import CARD_FILE, MANIFEST_FILE, STAGE_JSON

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def lock_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(f".{out.name}.lock")


@contextlib.contextmanager
def build_lock(out: str | Path, wait_s: float = 0.0) -> Iterator[Path]:
    """Hold the exclusive lock of build folder ``out`` (waiting up to ``wait_s`` seconds).

    Raises:
        PairsieveError: ``locked`` when another live process holds it after ``wait_s``.
    """
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held for the whole block
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "another process"
                    raise PairsieveError(
                        "locked",
                        f"build folder is being written by {holder}; wait for it or use "
                        "another --out",
                        file=str(out),
                    ) from None
                time.sleep(0.2)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        yield path
    finally:
        handle.close()


def prepare_staging(out: str | Path) -> Path:
    """The staging folder for ``out``: resumed if a crashed build left one, else seeded from the
    published build by hard links (artifacts are immutable, so unchanged stages are skipped).

    Half-written stage folders a killed run left (``.NAME.tmp-*``, ``.NAME.old-*``) are removed,
    so they can never be published. Call it holding the build lock.
    """
    out, staging = Path(out), staging_dir(out)
    if staging.exists():
        for pattern in (".*.tmp-*", ".*.old-*"):
            for leftover in staging.glob(pattern):
                shutil.rmtree(leftover, ignore_errors=True)
        return staging
    tmp = staging.with_name(staging.name + ".seed")
    shutil.rmtree(tmp, ignore_errors=True)
    if out.is_dir():
        shutil.copytree(out, tmp, copy_function=os.link)
    else:
        tmp.mkdir(parents=True)
    os.replace(tmp, staging)
    return staging


# Faults after which the staging folder is removed: a rerun cannot resume on a disk that is
# full or read-only, and a full disk must not be left full by the build that filled it.
_UNRESUMABLE = ("disk_full", "read_only")


def _size(folder: Path) -> str:
    size = io.folder_bytes(folder)
    return f"{size / 1e6:,.1f} MB" if size >= 1e5 else f"{size / 1e3:,.1f} kB"


def _after_failure(staging: Path, exc: BaseException, out: Path) -> BaseException:
    """Clean up after a failed build and say what stays: the exception to raise.

    A build that completed no stage, or that met a full or read-only disk, removes its staging
    folder (saying so, or where it is and how large when it cannot be removed); any other keeps
    it for the next run to resume from, and says where it is.
    """
    fault = environment_error(exc, where=str(out))
    completed = any(staging.glob(f"*/{STAGE_JSON}"))
    if completed and (fault is None or fault.code not in _UNRESUMABLE):
        if fault is not None:
            fault.add_note(f"kept {staging} ({_size(staging)}): the same command resumes from it")
        return fault or exc
    size = _size(staging) if staging.exists() else "empty"
    shutil.rmtree(staging, ignore_errors=True)
    if fault is None:
        return exc
    if staging.exists():
        fault.add_note(f"could not remove {staging} ({_size(staging)}): remove it")
    elif completed:
        fault.add_note(f"removed {staging} ({size}); the next run starts over")
    return fault


@contextlib.contextmanager
def building(out: str | Path) -> Iterator[Path]:
    """Hold the lock of ``out`` and yield its staging folder for the build to work in.

    On failure (Ctrl-C and SIGTERM included) the staging folder is removed or kept as
    `_after_failure` decides; a fault of the environment is raised as the `PairsieveError` that
    names it.
    """
    with build_lock(out):
        staging = prepare_staging(out)
        try:
            yield staging
        except BaseException as exc:
            raised = _after_failure(staging, exc, Path(out))
            if raised is exc:
                raise
            raise raised from exc


def _exchange(a: Path, b: Path) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(ctypes.get_errno(), "renameat2 failed", str(a))


def publish(out: str | Path) -> Path:
    """Atomically make the staging folder the published ``out`` and discard the old build."""
    out, staging = Path(out), staging_dir(out)
    if not out.exists():
        os.replace(staging, out)
    elif _exchange(staging, out):
        shutil.rmtree(staging)
    else:  # no renameat2 (not Linux): two renames, a moment without `out`
        old = out.with_name(f".{out.name}.old")
        os.replace(out, old)
        os.replace(staging, out)
        shutil.rmtree(old)
    return out


def manifest_files(manifest: dict) -> dict[str, str]:
    """File name -> sha256 of every file a shards manifest lists (train and eval splits)."""
    return {
        entry["name"]: entry["sha256"] for split in manifest["files"].values() for entry in split
    }


def verify(build_dir: str | Path) -> list[str]:
    """Problems found checking ``build_dir/shards`` against its manifest (empty when intact)."""
    layout = RunLayout(build_dir)
    shards, manifest_path = layout.shards, layout.manifest
    if not manifest_path.exists():
        return [f"missing {manifest_path}"]
    listed = manifest_files(json.loads(manifest_path.read_text()))
    problems = []
    for name, sha256 in sorted(listed.items()):
        path = shards / name
        if not path.exists():
            problems.append(f"missing file {name}")
        elif io.sha256_file(path) != sha256:
            problems.append(f"sha256 mismatch {name}")
    present = {p.name for p in shards.iterdir() if p.is_file()}
    for extra in sorted(present - set(listed) - {MANIFEST_FILE, STAGE_JSON, CARD_FILE}):
        problems.append(f"extra file {extra}")
    return problems
