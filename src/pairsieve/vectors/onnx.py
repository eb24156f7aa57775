"""ONNX Runtime inference of the bundled MiniLM, exported locally from its own weights.

Why not sentence-transformers' ``backend="onnx"``: it loads through ``optimum``, and
``optimum-onnx`` pins ``transformers<4.58`` while the stack runs transformers 5.x. So the model is
exported here with ``torch.onnx`` (mean pooling and L2 normalisation inside the graph, so one
session call returns sentence vectors), fused with onnxruntime's transformer optimizer, and
dynamically quantised to int8 with ``onnxruntime.quantization``. Nothing is downloaded: every
variant is derived from the safetensors weights in the model folder and kept under
``<cache_dir>/onnx/<model fingerprint>/``.

Variants (``EmbedConfig.backend``), measured in benchmarks/RESULTS.md:

* ``onnx``: the plain fp32 export; identical vectors to torch (cosine 1.0000).
* ``onnx-optimized``: attention, GELU and layer-norm fusion (the graph sentence-transformers
  calls O3-style); still fp32.
* ``onnx-int8``: the fused graph with int8 weights, per-channel and with reduced range: this
  machine's CPUs have AVX2 but no VNNI, where full-range u8s8 products saturate (per-tensor
  QInt8 without ``reduce_range`` measured a mean cosine of only 0.962 to fp32; per-channel with
  ``reduce_range`` 0.99).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import threading
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from pairsieve.config import EmbedConfig
from pairsieve.vectors.model_identity import weights_identity

log = logging.getLogger(__name__)

EXPORT_VERSION = 1  # bump when the export recipe changes: it is part of the cache namespace
_FILES = {
    "onnx": "model.onnx",
    "onnx-optimized": "model_optimized.onnx",
    "onnx-int8": "model_int8.onnx",
}
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _publish(build, final: Path) -> Path:
    """Run ``build(tmp_path)`` and rename its output into place (safe if two processes race)."""
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.stem}-{uuid.uuid4().hex}.tmp.onnx")
    try:
        build(tmp)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def _export_fp32(model_path: str, out: Path) -> None:
    """Trace transformer + mean pooling + L2 normalisation into one ONNX graph (opset 17)."""
    import torch
    from transformers import AutoModel

    # eager attention exports the MatMul/Softmax pattern that onnxruntime's fusion recognises
    model = AutoModel.from_pretrained(model_path, attn_implementation="eager").eval()

    class _Sentence(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state  # (b, s, d)
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (b, s, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (b, d)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    dummy = torch.ones(2, 8, dtype=torch.long)
    axes = {name: {0: "batch", 1: "sequence"} for name in _INPUTS}
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer warns that a padding check in transformers' mask code becomes a constant;
        # inputs are never padded beyond the mask, and tests/unit/vectors/test_embed.py checks
        # that other batch sizes and lengths agree with torch
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Sentence(),
            (dummy, dummy, torch.zeros_like(dummy)),
            str(out),
            dynamo=False,
            input_names=list(_INPUTS),
            output_names=["sentence_embedding"],
            dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
            opset_version=17,
        )


def _optimize(model_path: str, src: Path, out: Path) -> None:
    """Fuse attention / GELU / layer norms (onnxruntime.transformers.optimizer, BERT rules)."""
    from onnxruntime.transformers.optimizer import optimize_model

    config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    fused = optimize_model(
        str(src),
        model_type="bert",
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        opt_level=1,
    )
    log.debug(
        "onnx fusion: %s", {k: v for k, v in fused.get_fused_operator_statistics().items() if v}
    )
    fused.save_model_to_file(str(out))


def _quantize(src: Path, out: Path) -> None:
    """Dynamic int8 weights, per channel, reduced range (AVX2 without VNNI, see module doc)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        src,
        out,
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=True,
        # fused Attention nodes come from the com.microsoft domain, where shape inference stops
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def model_fingerprint(model_path: str) -> str:
    """Which weights (`model_identity.weights_identity`) and the export version: new weights or
    a new recipe get a new folder."""
    return "-".join([*weights_identity(model_path), f"v{EXPORT_VERSION}"])


_EXPORT_LOCK = threading.Lock()


def ensure_onnx_model(model_path: str, export_root: Path, backend: str) -> Path:
    """Path of the ``backend`` variant's ONNX file, exporting (once, ~10-20 s) when missing.

    `torch.onnx.export` keeps global state, so two exports at once in one process fail
    ("GLOBALS.in_onnx_export"): threads of one process, and processes sharing the folder, take
    turns (a thread lock plus an flock on the export folder).
    """
    folder = export_root / model_fingerprint(model_path)
    final = folder / _FILES[backend]
    if final.exists():
        return final
    folder.mkdir(parents=True, exist_ok=True)
    with _EXPORT_LOCK, open(folder / ".export.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            return _export_chain(model_path, folder, backend)
        except BaseException:
            # A model that does not export leaves no folder holding only the lock behind.
            if {p.name for p in folder.iterdir()} <= {".export.lock"}:
                shutil.rmtree(folder, ignore_errors=True)
            raise


@contextlib.contextmanager
def _quiet_export() -> Iterator[None]:
    """Hold back the exporters' own output: ONNX Runtime's quantiser logs a line per tensor (and
    advice about pre-processing) on the root logger, the tracer and optimiser warn about
    constants. None of it is actionable here, and it buries the build's own lines."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)


def _export_chain(model_path: str, folder: Path, backend: str) -> Path:
    log.info("preparing the %s encoder (first run only) ...", backend)
    with _quiet_export():
        return _export_steps(model_path, folder, backend)


def _export_steps(model_path: str, folder: Path, backend: str) -> Path:
    plain = _publish(lambda tmp: _export_fp32(model_path, tmp), folder / _FILES["onnx"])
    if backend == "onnx":
        return plain
    fused = _publish(
        lambda tmp: _optimize(model_path, plain, tmp), folder / _FILES["onnx-optimized"]
    )
    if backend == "onnx-optimized":
        return fused
    return _publish(lambda tmp: _quantize(fused, tmp), folder / _FILES["onnx-int8"])


class OnnxEncoder:
    """Sentence vectors from an onnxruntime session and the model's own fast tokenizer.

    Texts are sorted by length before batching so each batch pads only to its own longest text
    (what ``SentenceTransformer.encode`` does too), then returned in input order. The int8
    variant runs one text per call (see ``__init__``).
    """

    def __init__(self, onnx_file: Path, model_path: str, cfg: EmbedConfig, model_key: str) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.model_key = model_key
        self._tokenizer = Tokenizer.from_file(str(Path(model_path) / "tokenizer.json"))
        self._tokenizer.enable_truncation(cfg.max_seq_length)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106
        # Dynamic int8 quantises activations with one scale per tensor, i.e. per batch: a title's
        # vector moved by up to 0.03 with its batch neighbours (measured), so cached vectors would
        # depend on what else was missing. One text per call makes each vector a function of its
        # text alone and needs no padding; the cores then run texts side by side, one
        # single-threaded call each (15% more titles/s than one call on two threads, measured).
        self._per_text = cfg.backend == "onnx-int8"
        self._workers = (cfg.num_threads or os.cpu_count() or 1) if self._per_text else 1
        self._batch_size = 1 if self._per_text else cfg.batch_size
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1 if self._per_text else cfg.num_threads  # 0 = all cores
        options.inter_op_num_threads = 1
        # Idle worker threads sleep instead of spinning: on a CPU shared with other processes
        # (or with a second partition task) spinning threads steal the cores doing the work;
        # measured 2.2x more titles/s for onnx-int8 without spinning at load average ~12.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(onnx_file), options, providers=["CPUExecutionProvider"]
        )

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(b, s) int64 token ids and mask -> (b, d) float32; releases the GIL while it runs."""
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return self._session.run(None, feed)[0]

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n,) texts -> (n, d) float32 unit vectors."""
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        jobs = []
        for start in range(0, len(texts), self._batch_size):
            batch = self._tokenizer.encode_batch(
                [texts[i] for i in order[start : start + self._batch_size]]
            )
            ids = np.array([e.ids for e in batch], dtype=np.int64)  # (b, s)
            mask = np.array([e.attention_mask for e in batch], dtype=np.int64)  # (b, s)
            jobs.append((ids, mask))
        if self._workers > 1:
            with ThreadPoolExecutor(self._workers) as pool:
                chunks = list(pool.map(lambda job: self._run(*job), jobs))
        else:
            chunks = [self._run(*job) for job in jobs]
        vectors = np.empty((len(texts), chunks[0].shape[1]), dtype=np.float32)
        vectors[order] = np.concatenate(chunks)
        # int8 graphs drift slightly off the unit sphere; downstream treats dot products as cosines
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
        return vectors

    @property
    def dimension(self) -> int:
        """Width of the output vectors."""
        return int(self._session.get_outputs()[0].shape[1] or 0)
