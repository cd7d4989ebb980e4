"""Checkpoints that survive a change of PS count: per-PS shards plus one manifest.

Why this module exists: a resize may change p, so the PS that restores a block is not the one
that saved it. Each PS therefore saves the blocks it owns to its own shard file
(``shard-<generation>-<ps>.pt``, written to a temporary file and ``os.replace``-d), and the
supervisor, once every PS has saved, atomically replaces ``manifest.json``, which maps each
block to the shard holding it. Readers see the old manifest or the new one, never a mix; the
shards the new manifest no longer names are deleted afterwards.

Offsets are not in the checkpoint: the consumer group's committed offsets are the stream
position (committed only after the step that used them), and a graceful stop checkpoints
after the last commit, so the two agree. A crash loses the model updates since the last
checkpoint (documented in docs/trainer.md).

The manifest half is torch-free (the supervisor does not import torch); shard I/O imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.atomic import atomic_path, atomic_write_text

if TYPE_CHECKING:  # pragma: no cover
    from trainer.ps import ShardState

MANIFEST = "manifest.json"
FORMAT = "kale.ckpt/v1"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used for this job (wrong model, missing shard)."""


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest in ``directory`` (None when there is no checkpoint yet)."""
    path = Path(directory) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a {FORMAT} manifest")
    return data


def plan_from_manifest(directory: Path, spec: dict[str, Any]) -> dict[int, str]:
    """Block index -> shard path to restore from ({} when there is no checkpoint).

    Raises :class:`CheckpointError` when the checkpoint was written for another model.
    """
    manifest = read_manifest(directory)
    if manifest is None:
        return {}
    if manifest.get("spec") != spec:
        raise CheckpointError(
            f"{Path(directory) / MANIFEST}: written for a different model "
            f"({manifest.get('spec')}); use another checkpoint folder"
        )
    plan = {int(k): str(Path(directory) / v) for k, v in manifest.get("blocks", {}).items()}
    missing = sorted({p for p in plan.values() if not Path(p).is_file()})
    if missing:
        raise CheckpointError(f"checkpoint shard missing: {missing[0]}")
    return plan


def write_manifest(
    directory: Path,
    *,
    spec: dict[str, Any],
    blocks: dict[int, str],
    info: dict[str, Any],
) -> Path:
    """Atomically point the checkpoint at new shards and delete the shards it no longer names."""
    directory = Path(directory)
    manifest = {
        "format": FORMAT,
        "spec": spec,
        "blocks": {str(k): Path(v).name for k, v in sorted(blocks.items())},
        "written_at": time.time(),
        **info,
    }
    path = directory / MANIFEST
    atomic_write_text(path, json.dumps(manifest, indent=2) + "\n")
    keep = set(manifest["blocks"].values())
    for stale in directory.glob("shard-*.pt"):
        if stale.name not in keep:
            with contextlib.suppress(OSError):
                stale.unlink()
    return path


def save_shard(state: ShardState, path: Path) -> None:
    """Write one PS's blocks atomically (temporary file in the same folder, then replace)."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(state.state_dict(), tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())


def restore(state: ShardState, plan: dict[int, str]) -> int:
    """Load the blocks ``state`` owns from the shards named in ``plan``; blocks restored."""
    import torch

    wanted = {b.index for b in state.blocks}
    files: dict[str, list[int]] = {}
    for idx, path in plan.items():
        if idx in wanted:
            files.setdefault(path, []).append(idx)
    restored = 0
    for path, indices in files.items():
        saved = torch.load(path, map_location="cpu", weights_only=True)
        blocks = saved["blocks"]
        state.load_blocks({i: blocks[i] for i in indices if i in blocks})
        restored += sum(1 for i in indices if i in blocks)
        state.updates = max(state.updates, int(saved.get("updates", 0)))
    return restored
