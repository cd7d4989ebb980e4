"""kale's fitted state in and out of a saved file (the base class writes the file itself).

The state is what predicting needs and nothing else: the geometry, the profile table, the
backbone's weights, the log offset and scales, the kept share and band factors, and the
networks' weights (``weights.pt``; none when the backbone forecasts alone, which saves its
``band`` instead). The training data is not kept: a loaded model predicts exactly as the
fitted one did and can be refitted on its saved context.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import torch

from forecasting.backbone import Geometry
from forecasting.base import Payload
from forecasting.decomposition import SeasonalProfile
from forecasting.transformer.model import build_net

if TYPE_CHECKING:
    from forecasting.transformer.forecaster import KaleForecaster

_FLOATS = ("offset", "scale", "season_mu", "season_sd", "alpha")


def dump_state(model: KaleForecaster) -> Payload:
    """The fitted state as a :class:`~forecasting.base.Payload`."""
    assert model.geom is not None and model.weights is not None
    blobs: dict[str, bytes] = {}
    if model.net is not None:
        buf = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in model.net.state_dict().items()}, buf)
        blobs["weights.pt"] = buf.getvalue()
    meta = {
        "geometry": model.geom.to_dict(),
        "net": model.net_config if model.net is not None else None,
        "offset": model.offset,
        "scale": model.scale,
        "season_mu": model.season_mu,
        "season_sd": model.season_sd,
        "alpha": model.alpha,
        "profile_anchor": model.profile.anchor,
    }
    arrays = {
        "profile": model.profile.table,
        "backbone": model.weights,
        "k_lo": model.k_lo,
        "k_hi": model.k_hi,
    }
    if model.band is not None:
        arrays["band"] = model.band
    return Payload(meta=meta, arrays=arrays, blobs=blobs)


def restore_state(model: KaleForecaster, payload: Payload) -> None:
    """Set ``model``'s fitted state from what :func:`dump_state` wrote (on the CPU)."""
    m = payload.meta
    model.geom = Geometry.from_dict(m["geometry"])
    model.net_config = dict(m["net"] or {})
    for key in _FLOATS:
        setattr(model, key, float(m[key]))
    model.k_lo, model.k_hi = payload.arrays["k_lo"], payload.arrays["k_hi"]
    model.profile = SeasonalProfile(payload.arrays["profile"], int(m["profile_anchor"]))
    model.weights = payload.arrays["backbone"]
    model.band = payload.arrays.get("band")
    model.device = "cpu"
    if m["net"] is None:
        model.net = None
        return
    net = build_net(model.net_config)
    state = torch.load(
        io.BytesIO(payload.blobs["weights.pt"]), map_location="cpu", weights_only=True
    )
    net.load_state_dict(state)
    net.eval()
    model.net = net
