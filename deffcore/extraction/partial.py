"""An unfinished extraction's finished batches, kept in `<key>/partial/` so a run resumes."""

from __future__ import annotations

import io
import json
import re
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core import files
from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.core.errors import CacheCorruptError
from deffcore.extraction.batches import SavedBatch
from deffcore.extraction.cache import check_spec, entry_folder, is_int, read_json_file
from deffcore.inputs.run_spec import RunSpec

PARTIAL_FORMAT = 1

_BATCH_RE = re.compile(r"batch-(\d{6})-(\d{6})\.npz")


class PartialRun:
    """The finished batches of `spec`'s extraction, kept in `<key>/partial/` as it goes.

    Implements `deffcore.extraction.forward.BatchCheckpoint`. Files:

        manifest.json                {"format": 1, "key", "spec", "created", "plan": {...}}
        batch-<index>-<rows>.npz     one chunk of consecutive finished batches: slots (b,)
                                     int64 (passage rows, in plan order), cap () int64
                                     (batch-size cap after it, -1 = auto),
                                     one (L+1, b, d) float32 array per extracted pooling,
                                     pos0_ratio (L+1, b) float32

    Every file is written to a temp name and renamed into place, so a kill at any instant
    leaves whole files only. `plan` (from `extract_pooled`: token ids' sha256, L, d, device,
    dtype, batching) must match the manifest's for the batches to be reused; otherwise the
    partial is discarded. Only a caller holding the entry's lock (inside `get_or_compute`)
    should write one.
    """

    def __init__(self, spec: RunSpec, key: str | None = None):
        self.spec = spec
        self.key = key or spec.key()
        self.folder = entry_folder(self.key) / "partial"

    def discard(self) -> None:
        files.remove_partial(self.folder)

    def _start(self, plan: dict[str, Any]) -> None:
        self.discard()
        files.writable_partial(self.folder)
        manifest = {
            "format": PARTIAL_FORMAT,
            "key": self.key,
            "spec": asdict(self.spec),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "plan": plan,
        }
        files.atomic_write(self.folder / "manifest.json", json.dumps(manifest, indent=2).encode())

    def resume(self, plan: dict[str, Any], order: list[int]) -> list[SavedBatch]:
        """The finished batches that continue `order` from its start, in order.

        Starts a fresh partial (and returns []) when there is none or its plan differs. A batch
        file that is unreadable, misshapen, non-finite or does not continue `order` ends the
        resumed prefix; it and every later file are deleted.
        """
        plan = json.loads(json.dumps(plan))  # the manifest's JSON form, for comparison
        files.refuse_foreign(self.folder.parent)
        try:
            manifest = read_json_file(self.folder / "manifest.json")
        except CacheCorruptError:
            manifest = None
        if not (
            isinstance(manifest, dict)
            and manifest.get("format") == PARTIAL_FORMAT
            and manifest.get("key") == self.key
            and manifest.get("plan") == plan
        ):
            if manifest is not None:
                warnings.warn(
                    f"The unfinished run {self.key} was extracted with other settings (device, "
                    "dtype or batching); starting it again.",
                    stacklevel=2,
                )
            self._start(plan)
            return []
        for tmp in self.folder.iterdir():  # half-written files of a killed process
            if files.TMP_RE.fullmatch(tmp.name):
                files.remove_file(tmp)
        batch_files: dict[int, list[Path]] = {}
        for path in self.folder.iterdir():
            m = _BATCH_RE.fullmatch(path.name)
            if m:
                batch_files.setdefault(int(m.group(1)), []).append(path)
        L1, d = plan["layers"] + 1, plan["d_model"]
        saved: list[SavedBatch] = []
        start, index = 0, 0
        while len(batch_files.get(index, [])) == 1:
            batch = self._read_batch(batch_files[index][0], L1, d)
            if batch is None or batch.slots.tolist() != order[start : start + len(batch.slots)]:
                break
            saved.append(batch)
            start += len(batch.slots)
            index += 1
        for idx, paths in batch_files.items():
            if idx >= index:
                for path in paths:
                    files.remove_file(path)
        return saved

    @staticmethod
    def _read_batch(path: Path, L1: int, d: int) -> SavedBatch | None:
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {name: z[name] for name in z.files}
        except Exception:  # a torn or foreign file: not a finished batch
            return None
        slots, cap = arrays.get("slots"), arrays.get("cap")
        if slots is None or slots.ndim != 1 or slots.dtype != np.int64 or cap is None:
            return None
        b = len(slots)
        rows = {}
        for name in (*EXTRACTED_POOLINGS, "pos0_ratio"):
            shape = (L1, b) if name == "pos0_ratio" else (L1, b, d)
            arr = arrays.get(name)
            if arr is None or arr.shape != shape or arr.dtype != np.float32:
                return None
            if not np.isfinite(arr).all():
                return None
            rows[name] = arr
        cap_value = int(cap)
        return SavedBatch(slots=slots, rows=rows, cap=None if cap_value < 1 else cap_value)

    def save(self, index: int, batch: SavedBatch) -> None:
        """Persist finished batch `index` (atomic)."""
        buf = io.BytesIO()
        np.savez(
            buf,
            slots=np.asarray(batch.slots, dtype=np.int64),
            cap=np.asarray(-1 if batch.cap is None else batch.cap, dtype=np.int64),
            **{name: np.asarray(arr, dtype=np.float32) for name, arr in batch.rows.items()},
        )
        name = f"batch-{index:06d}-{len(batch.slots):06d}.npz"
        files.refuse_foreign(self.folder.parent)
        files.atomic_write(self.folder / name, buf.getvalue())


def partial_info(folder: Path) -> dict[str, Any]:
    """Spec and progress of a partial folder (CacheCorruptError if its manifest is bad)."""
    manifest = read_json_file(folder / "manifest.json")
    where = f"Unfinished run {folder.parent.name}"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("plan"), dict):
        raise CacheCorruptError(f"{where}: manifest.json is not a run manifest.")
    total = manifest["plan"].get("n")
    if not is_int(total):
        raise CacheCorruptError(f"{where}: manifest.json has no passage count.")
    done = 0
    for path in folder.iterdir():
        m = _BATCH_RE.fullmatch(path.name)
        if m:
            done += int(m.group(2))
    layers = manifest["plan"].get("layers")
    return {
        "layers": layers if is_int(layers) else None,
        "spec": check_spec(manifest.get("spec"), where),
        "created": manifest.get("created") if isinstance(manifest.get("created"), str) else "",
        "done_passages": min(done, total),
        "total_passages": total,
    }
