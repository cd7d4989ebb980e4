"""Training kale's networks: sampled windows, pinball loss, early stopping on a held-out tail.

``members`` networks are trained one after another from seeds ``seed``, ``seed + 1``, … and
their quantiles averaged (:class:`~forecasting.transformer.model.MeanOfNets`): one network's
correction depends on its seed enough to move a trace across a target
(docs/decisions/0014-three-networks-averaged.md). They share one time budget, and when the
first never beats its starting point (no correction) it is the only one. Training runs on one
thread by default (docs/decisions/0013-one-training-thread.md).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from forecasting.backbone import Geometry, backbone
from forecasting.transformer.features import Inputs, build_inputs
from forecasting.transformer.model import KaleNet, MeanOfNets, pinball_loss

log = logging.getLogger(__name__)

Tensors = tuple[torch.Tensor, ...]
Batch = Callable[[np.ndarray], tuple[Tensors, torch.Tensor]]
"""origins → (the network's inputs, the (B, H) targets) as tensors on the training device."""


@dataclass(frozen=True)
class TrainSettings:
    """The training loop's knobs (the forecaster's constructor arguments of the same names)."""

    seed: int
    epochs: int
    patience: int
    steps_per_epoch: int
    batch_size: int
    lr: float
    time_budget_s: float
    d_model: int
    heads: int
    enc_layers: int
    dec_layers: int
    dropout: float
    members: int

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> TrainSettings:
        return cls(
            seed=int(p["seed"]),
            epochs=int(p["epochs"]),
            patience=int(p["patience"]),
            steps_per_epoch=int(p["steps_per_epoch"]),
            batch_size=int(p["batch_size"]),
            lr=float(p["lr"]),
            time_budget_s=float(p["time_budget_s"]),
            d_model=int(p["d_model"]),
            heads=int(p["heads"]),
            enc_layers=int(p["enc_layers"]),
            dec_layers=int(p["dec_layers"]),
            dropout=float(p["dropout"]),
            members=max(1, int(p.get("members", 1))),
        )


@contextlib.contextmanager
def torch_settings(threads: int) -> Iterator[None]:
    """Thread count and deterministic kernels for the duration of a fit/predict."""
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(max(1, threads))
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)


def resolve_device(device: str) -> str:
    """``cpu`` or ``cuda``; ``cuda`` without a GPU trains on the CPU with a warning."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        warnings.warn(
            "kale: CUDA is not available, training on the CPU", RuntimeWarning, stacklevel=3
        )
        return "cpu"
    return device


def to_tensors(inputs: Inputs, device: str) -> Tensors:
    """A batch of :class:`~forecasting.transformer.features.Inputs` as tensors."""
    return tuple(torch.from_numpy(a).to(device) for a in (inputs.long, inputs.short, inputs.out))


def window_batches(
    *,
    d: np.ndarray,
    dn: np.ndarray,
    sn: np.ndarray,
    cal: np.ndarray,
    geom: Geometry,
    weights: np.ndarray,
    scale: float,
    device: str,
) -> Batch:
    """Batches of training or held-out windows: the inputs at each origin and the target,
    the backbone's error over the horizon (in units of ``scale``)."""
    h = geom.horizon

    def batch(origins: np.ndarray) -> tuple[Tensors, torch.Tensor]:
        ref, bb = backbone(d, geom, origins, weights)
        ref, bb = ref / scale, bb / scale
        inputs = build_inputs(dn=dn, sn=sn, cal=cal, origins=origins, ref=ref, bb=bb, geom=geom)
        target = dn[origins[:, None] + np.arange(h)[None, :]] - bb
        return to_tensors(inputs, device), torch.from_numpy(target.astype(np.float32)).to(device)

    return batch


def network_quantiles(
    net: torch.nn.Module, batch: Batch, origins: np.ndarray, horizon: int
) -> tuple[np.ndarray, np.ndarray]:
    """The network's (B, H, 3) quantiles and the (B, H) targets at ``origins``, in chunks of
    about 512 windows."""
    qs, ts = [], []
    for part in np.array_split(origins, max(1, len(origins) // 512)):
        x, target = batch(part)
        with torch.no_grad():
            qs.append(net(*x)[:, :horizon].cpu().numpy().astype(float))
        ts.append(target.cpu().numpy().astype(float))
    return np.concatenate(qs), np.concatenate(ts)


def net_shape(geom: Geometry, settings: TrainSettings) -> dict[str, int]:
    """The :class:`KaleNet` constructor arguments for this geometry (saved as ``net_config``)."""
    return {
        "long_in": 2 * geom.p_long + 4,
        "short_in": 2 * geom.p_short + 4,
        "out_in": 3 * geom.p_out + 4,
        "n_long": geom.n_long,
        "n_short": geom.n_short,
        "n_out": geom.n_out,
        "p_out": geom.p_out,
        "d_model": settings.d_model,
        "heads": settings.heads,
        "enc_layers": settings.enc_layers,
        "dec_layers": settings.dec_layers,
        "ff": 2 * settings.d_model,
    }


def train_networks(
    batch: Batch,
    train_origins: np.ndarray,
    val_origins: np.ndarray,
    rng: np.random.Generator,
    *,
    geom: Geometry,
    settings: TrainSettings,
    device: str,
    progress: bool = False,
) -> tuple[torch.nn.Module, dict[str, int], dict[str, Any]]:
    """Train ``settings.members`` networks one after another, each early-stopped on the
    held-out tail, and return (their mean, its ``net_config``, a report for the fit summary).

    They share the time budget: a member that would start after it is not trained. When the
    first one never beats its starting point (no correction), it is the only one.
    """
    shape = net_shape(geom, settings)
    h = geom.horizon
    val_x, val_y = batch(val_origins)
    started = time.perf_counter()
    wanted = settings.members
    nets: list[KaleNet] = []
    runs: list[dict[str, Any]] = []
    budget_hit = False
    for k in range(wanted):
        left = settings.time_budget_s - (time.perf_counter() - started)
        if k and left <= 0:
            budget_hit = True
            log.warning("kale: time budget spent after %d of %d networks", k, wanted)
            break
        torch.manual_seed(settings.seed + k)
        net, run = train_member(
            batch,
            train_origins,
            val_x,
            val_y,
            rng,
            shape=shape,
            settings=settings,
            device=device,
            budget_s=left,
            horizon=h,
            progress=progress,
            label=f" {k + 1}/{wanted}" if wanted > 1 else "",
        )
        nets.append(net)
        runs.append(run)
        budget_hit = budget_hit or run["time_budget_hit"]
        if k == 0 and run["best_epoch"] == 0:
            # The tail has nothing for a network to learn; more seeds would only be more
            # chances to fit its noise (and cost their time at every predict).
            log.info(
                "kale: the first network never beat no correction on the held-out "
                "tail; no further networks trained"
            )
            break
    config = {**shape, "members": len(nets)} if len(nets) > 1 else shape
    mean: torch.nn.Module = MeanOfNets(nets) if len(nets) > 1 else nets[0]
    mean.eval()
    with torch.no_grad():
        ensemble_val = float(pinball_loss(mean(*val_x)[:, :h], val_y))
    return (
        mean,
        config,
        {
            "epochs_run": sum(r["epochs_run"] for r in runs),
            "best_epoch": runs[0]["best_epoch"],
            "val_pinball_backbone": runs[0]["val_pinball_backbone"],
            "val_pinball": ensemble_val,
            "networks": len(nets),
            "member_runs": [
                {
                    "best_epoch": r["best_epoch"],
                    "epochs_run": r["epochs_run"],
                    "val_pinball": r["val_pinball"],
                }
                for r in runs
            ],
            "train_seconds": time.perf_counter() - started,
            "time_budget_hit": budget_hit,
        },
    )


def train_member(
    batch: Batch,
    train_origins: np.ndarray,
    val_x: Tensors,
    val_y: torch.Tensor,
    rng: np.random.Generator,
    *,
    shape: dict[str, int],
    settings: TrainSettings,
    device: str,
    budget_s: float,
    horizon: int,
    progress: bool = False,
    label: str = "",
) -> tuple[KaleNet, dict[str, Any]]:
    """One network, early-stopped on the held-out tail (its best epoch's weights). With
    ``progress``, a tqdm bar (to stderr, when it is a terminal) shows the epochs."""
    h = horizon
    net = KaleNet(**shape, dropout=settings.dropout).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=settings.lr, weight_decay=1e-4)

    def val_loss() -> float:
        net.eval()
        with torch.no_grad():
            return float(pinball_loss(net(*val_x)[:, :h], val_y))

    best = val_loss()
    baseline_loss = best
    best_state = copy.deepcopy(net.state_dict())
    best_epoch, stale, epochs_run, budget_hit = 0, 0, 0, False
    started = time.perf_counter()
    epochs: Iterable[int] = range(1, settings.epochs + 1)
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(epochs, desc=f"kale fit{label}", unit="epoch", leave=False)
        epochs = bar
    bs = min(settings.batch_size, len(train_origins))
    for epoch in epochs:
        net.train()
        train_loss = 0.0
        for _ in range(settings.steps_per_epoch):
            x, target = batch(np.sort(rng.choice(train_origins, bs, replace=False)))
            loss = pinball_loss(net(*x)[:, :h], target)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            train_loss += float(loss.detach()) / settings.steps_per_epoch
        epochs_run = epoch
        current = val_loss()
        log.debug("kale epoch %d: train %.4f val %.4f", epoch, train_loss, current)
        if bar is not None:
            bar.set_postfix(val=f"{current:.4f}", best=f"{best:.4f}")
        if current < best - 1e-4:
            best, best_epoch, stale = current, epoch, 0
            best_state = copy.deepcopy(net.state_dict())
        else:
            stale += 1
        if stale >= settings.patience:
            break
        if time.perf_counter() - started > budget_s:
            budget_hit = True
            log.warning("kale: training stopped by the time budget after %d epochs", epoch)
            break
    if bar is not None:
        bar.close()
    net.load_state_dict(best_state)
    net.eval()
    return net, {
        "epochs_run": epochs_run,
        "best_epoch": best_epoch,
        "val_pinball_backbone": baseline_loss,
        "val_pinball": best,
        "time_budget_hit": budget_hit,
    }


REFIT_VAL_ORIGINS = 256
"""Held-out windows that judge a fine-tuned network against the one it started from (evenly
thinned): the judgement needs a level, not the per-step detail the band is calibrated on."""
REFIT_LR_SHARE = 0.5
"""A fine-tune's learning rate, as a share of a full fit's: the weights start near a minimum."""


def fine_tune_networks(
    net: torch.nn.Module,
    batch: Batch,
    new_origins: np.ndarray,
    old_origins: np.ndarray,
    val_origins: np.ndarray,
    rng: np.random.Generator,
    *,
    settings: TrainSettings,
    steps: int,
    horizon: int,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Continue training ``net`` (changed in place, and returned) for ``steps`` gradient
    steps per member on batches half of ``new_origins`` (windows it never trained on) and
    half of ``old_origins`` (replayed, so that the new days do not overwrite what the old
    ones taught).

    Each member keeps its fine-tuned weights only if they do better than its starting
    weights on the held-out windows (at most :data:`REFIT_VAL_ORIGINS` of them), so a
    refit is never worse there than the fit it started from.
    """
    started = time.perf_counter()
    members = list(net.members) if isinstance(net, MeanOfNets) else [net]
    pick = np.unique(
        np.linspace(0, len(val_origins) - 1, min(REFIT_VAL_ORIGINS, len(val_origins)))
        .round()
        .astype(int)
    )
    val_x, val_y = batch(val_origins[pick])
    pool_new = new_origins if len(new_origins) else old_origins
    pool_old = old_origins if len(old_origins) else new_origins
    bs = min(settings.batch_size, len(pool_new) + len(pool_old))
    runs = []
    for member in members:

        def val_loss(m: torch.nn.Module = member) -> float:
            m.eval()
            with torch.no_grad():
                return float(pinball_loss(m(*val_x)[:, :horizon], val_y))

        before = val_loss()
        start_state = copy.deepcopy(member.state_dict())
        opt = torch.optim.AdamW(
            member.parameters(), lr=settings.lr * REFIT_LR_SHARE, weight_decay=1e-4
        )
        for _ in range(steps):
            member.train()
            half = bs // 2
            origins = np.concatenate(
                [
                    rng.choice(pool_new, half, replace=len(pool_new) < half),
                    rng.choice(pool_old, bs - half, replace=len(pool_old) < bs - half),
                ]
            )
            x, target = batch(np.sort(origins))
            loss = pinball_loss(member(*x)[:, :horizon], target)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(member.parameters(), 1.0)
            opt.step()
        after = val_loss() if steps else before
        kept = after < before
        if not kept:
            member.load_state_dict(start_state)
        member.eval()
        runs.append({"val_pinball_before": before, "val_pinball_after": after, "kept": kept})
    net.eval()
    return net, {
        "fine_tune_steps": steps,
        "fine_tune_windows": {"new": len(new_origins), "replayed_from": len(old_origins)},
        "member_runs": runs,
        "networks": len(members),
        "train_seconds": time.perf_counter() - started,
    }
