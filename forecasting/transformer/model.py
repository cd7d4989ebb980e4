"""The kale network: a small encoder–decoder transformer over patched, decomposed channels.

Encoder tokens are patches of the input window — a long context (a day or more, ≤ 24
patches) and a short, finer one (the last few patches) — each a linear embedding of its
deseasonalised and seasonal values plus the calendar (time of day, day of week) of its last
step, with a sinusoidal positional encoding so attention knows the order. Decoder queries
are patches of the horizon, embedded from what is known about the future (the seasonal
profile, the backbone forecast, the calendar) plus their own positional encoding; they
attend to the encoder and a linear head emits three quantiles per step. The median starts at
zero — the backbone — and the spreads start at ±1.28 (a unit normal's p10/p90), so training
begins from the decomposition forecast and learns corrections to it.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal(length: int, dim: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(1e4) / dim))
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return pe


class KaleNet(nn.Module):
    """(long, short, out) patches → (B, n_out·p_out, 3) quantiles (p10 ≤ p50 ≤ p90)."""

    pe_enc: torch.Tensor
    pe_dec: torch.Tensor

    def __init__(
        self,
        *,
        long_in: int,
        short_in: int,
        out_in: int,
        n_long: int,
        n_short: int,
        n_out: int,
        p_out: int,
        d_model: int = 32,
        heads: int = 2,
        enc_layers: int = 2,
        dec_layers: int = 1,
        ff: int = 64,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.p_out = p_out
        self.long_proj = nn.Linear(long_in, d_model)
        self.short_proj = nn.Linear(short_in, d_model)
        self.out_proj = nn.Linear(out_in, d_model)
        self.kind = nn.Parameter(torch.zeros(2, d_model))
        self.register_buffer("pe_enc", sinusoidal(n_long + n_short, d_model), persistent=False)
        self.register_buffer("pe_dec", sinusoidal(n_out, d_model), persistent=False)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(
                d_model, heads, ff, dropout, batch_first=True, norm_first=True
            ),
            enc_layers,
            enable_nested_tensor=False,
        )
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(
                d_model, heads, ff, dropout, batch_first=True, norm_first=True
            ),
            dec_layers,
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, p_out * 3)
        nn.init.zeros_(self.head.weight)
        with torch.no_grad():
            bias = self.head.bias.view(p_out, 3)
            bias[:, 0] = 0.0
            bias[:, 1:] = math.log(math.expm1(1.2816))

    def forward(self, long: torch.Tensor, short: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        enc = torch.cat(
            [self.long_proj(long) + self.kind[0], self.short_proj(short) + self.kind[1]], dim=1
        )
        enc = self.encoder(enc + self.pe_enc[: enc.shape[1]])
        dec = self.decoder(self.out_proj(out) + self.pe_dec[: out.shape[1]], enc)
        raw = self.head(self.norm(dec)).view(out.shape[0], -1, 3)
        mid = raw[..., 0]
        lo = mid - nn.functional.softplus(raw[..., 1])
        hi = mid + nn.functional.softplus(raw[..., 2])
        return torch.stack([lo, mid, hi], dim=-1)


class MeanOfNets(nn.Module):
    """Several :class:`KaleNet` trained from different seeds; their quantiles averaged.

    One small network trained for a few epochs ends wherever its seed and the machine's
    float rounding take it; the mean of members is a steadier correction
    (docs/decisions/0014-three-networks-averaged.md). Averaging keeps p10 ≤ p50 ≤ p90,
    since every member's are ordered.
    """

    def __init__(self, members: list[KaleNet]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, long: torch.Tensor, short: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return torch.stack([m(long, short, out) for m in self.members]).mean(dim=0)


def build_net(config: dict[str, int], dropout: float = 0.0) -> nn.Module:
    """The network a saved ``net_config`` describes: one KaleNet, or the mean of
    ``config["members"]`` of them (files saved before members existed have none: one)."""
    shape = {k: v for k, v in config.items() if k != "members"}
    members = int(config.get("members", 1))
    if members <= 1:
        return KaleNet(**shape, dropout=dropout)
    return MeanOfNets([KaleNet(**shape, dropout=dropout) for _ in range(members)])


def pinball_loss(
    pred: torch.Tensor, target: torch.Tensor, levels: tuple[float, ...] = (0.1, 0.5, 0.9)
) -> torch.Tensor:
    """Mean pinball loss over the quantile levels; ``pred`` (B, H, Q), ``target`` (B, H)."""
    q = torch.tensor(levels, dtype=pred.dtype, device=pred.device)
    diff = target[..., None] - pred
    return torch.maximum(q * diff, (q - 1.0) * diff).mean()
