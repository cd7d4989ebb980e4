"""Daylight-saving clock changes found in a UTC trace, and undone.

Traffic follows its users' local clock; a trace stored in UTC sees that clock move by an
hour at a daylight-saving change, for all of the traffic (one time zone) or part of it
(users in several). A profile averaged over the weeks before and after would put every
ramp and peak partly in the wrong hour until the old weeks leave the history, so the
change is found from the data and the days before it are put on the current clock
(docs/decisions/0003-clock-changes-found-from-the-data.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CLOCK_SHARES = (0.25, 0.5, 0.75, 1.0)
"""Shares of the traffic whose clock may have moved: all of it (one time zone), or part
(users in several time zones, whose daylight-saving dates differ)."""
CLOCK_MIN_GAIN = 0.5
"""Share of the after-change difference that moving the days before must explain: real
moves explained 0.60-0.91, no move at most 0.25
(docs/decisions/0003-clock-changes-found-from-the-data.md)."""
CLOCK_MIN_DAYS = 2
"""Whole days needed after a change to find it (before it: a week when the traffic has a
weekly pattern, so that every weekday after it has its own day before it)."""
CLOCK_MAX_CHANGES = 2
"""Changes looked for one after the other (America and Europe change weeks apart)."""
CLOCK_MIN_AGREEMENT = 0.8
"""Share of the days after the change that must each be closer to their moved weekday than to
the unmoved one: a real change convinces every day, days alternating between shapes do not."""


def moved_share(z: np.ndarray, moved: np.ndarray, share: float) -> np.ndarray:
    """``log((1 - share) * exp(z) + share * exp(moved))``: traffic adds up, so a share of it
    on another clock mixes in linearly (``z`` is log traffic)."""
    if share >= 1.0:
        return np.asarray(moved, dtype=float)
    return np.logaddexp(np.log1p(-share) + z, np.log(share) + moved)


@dataclass(frozen=True)
class ClockChange:
    """At step ``at`` the clock of ``share`` of the traffic moved by ``shift`` steps.

    ``shift`` > 0: that traffic now comes ``shift`` steps later in UTC (its users' clocks went
    back an hour, as at the end of summer time).
    """

    at: int
    shift: int
    share: float
    gain: float

    def apply(self, z: np.ndarray, day: int, week: int | None = None) -> np.ndarray:
        """``z`` (log traffic) with the steps before ``at`` put on the current clock.

        A step before the change becomes ``(1 - share) * y[t] + share * y[t - shift]``
        (:func:`moved_share`; ``exp(z)`` is the traffic plus the model's offset, which the mix
        keeps). Where ``t - shift`` falls outside the days
        before the change (the first hour of the history, the last before the change), the
        same time a ``week`` later or earlier stands in (the same weekday), else a ``day``.
        """
        z = np.asarray(z, dtype=float)
        out = z.copy()
        t = np.arange(min(self.at, len(z)))
        want = t - self.shift
        src = want.copy()
        for period in ([week] if week else []) + [day]:
            bad = (src < 0) | (src >= self.at)
            src = np.where(bad & (want < 0), want + period, src)
            src = np.where(bad & (want >= self.at), want - period, src)
        src = np.clip(src, 0, max(self.at - 1, 0))
        out[t] = moved_share(z[t], z[src], self.share)
        return out


def _shape_rows(rows: np.ndarray, share: float, shift: int) -> np.ndarray:
    """Each day's shape (log, less its mean) with ``share`` of its traffic moved ``shift``
    steps later."""
    if share > 0:
        rows = moved_share(rows, np.roll(rows, shift, axis=1), share)
    return rows - rows.mean(axis=1, keepdims=True)


def _same_weekday_errors(
    before: np.ndarray, after: np.ndarray, group: np.ndarray, first_split: int
) -> np.ndarray:
    """For each split k, the squared distance of every day from k on to the mean of the
    days of its weekday (``group``) before k, with the days before taken from ``before``
    and those after from ``after``; ``inf`` where a split has no such pairs. Running sums
    per weekday make each split cost O(day)."""
    days = len(after)
    hot = (group[:, None] == np.arange(group.max() + 1)[None, :]).astype(float)  # days x G
    zero = np.zeros((1, *hot.shape[1:]))
    count_b = np.concatenate([zero, np.cumsum(hot, axis=0)])  # days before k
    sum_b = np.concatenate(
        [
            np.zeros((1, hot.shape[1], before.shape[1])),
            np.cumsum(hot[:, :, None] * before[:, None, :], axis=0),
        ]
    )
    rev = slice(None, None, -1)
    count_a = np.concatenate([np.cumsum(hot[rev], axis=0)[rev], zero])  # days from k on
    sum_a = np.concatenate(
        [
            np.cumsum((hot[:, :, None] * after[:, None, :])[rev], axis=0)[rev],
            np.zeros_like(sum_b[:1]),
        ]
    )
    sq_a = np.concatenate(
        [np.cumsum((hot * np.sum(after * after, axis=1)[:, None])[rev], axis=0)[rev], zero]
    )
    out = np.full(days + 1, np.inf)
    for k in range(first_split, days - CLOCK_MIN_DAYS + 1):
        if np.any((count_a[k] > 0) & (count_b[k] == 0)):
            continue
        seen = count_b[k] > 0
        ref = sum_b[k][seen] / count_b[k][seen][:, None]
        out[k] = float(
            np.sum(sq_a[k][seen])
            - 2 * np.sum(sum_a[k][seen] * ref)
            + np.sum(count_a[k][seen] * np.sum(ref * ref, axis=1))
        )
    return out


def find_clock_change(
    r: np.ndarray, day: int, hour: int, day_start: int = 0, *, weekly: bool = False
) -> ClockChange | None:
    """A one-hour move of the traffic's clock at a midnight, if the history shows one.

    Each whole day from ``day_start`` (a midnight) is compared with the mean of the days of
    its weekday (``weekly``; else all days) before a split, with and without ``share`` of
    the earlier days' traffic moved by ±``hour`` steps (``r``: the log series less its
    trend; only the days' shapes count, not their levels). The split, share and direction
    that explain the largest part of the difference are kept when that part is at least
    :data:`CLOCK_MIN_GAIN` and the days after the split agree one by one
    (:data:`CLOCK_MIN_AGREEMENT`). Comparing the days after with the days before, not each
    day with all others, matters for partial moves: mixing an hour-shifted copy into a day
    smooths it, which alone makes days look more alike.
    """
    if hour < 1 or day < 2 * hour:
        return None
    first = int(day_start) % day
    days = (len(r) - first) // day
    first_split = 7 if weekly else CLOCK_MIN_DAYS
    if days < first_split + CLOCK_MIN_DAYS:
        return None
    raw = np.asarray(r[first : first + days * day], dtype=float).reshape(days, day)
    rows = _shape_rows(raw, 0.0, 0)
    group = np.arange(days) % 7 if weekly else np.zeros(days, dtype=int)
    unmoved = _same_weekday_errors(rows, rows, group, first_split)
    # The split, share and direction that remove the most error win (a ratio would favour
    # splits that leave out the days that disagree); the ratio then decides.
    best: tuple[float, int, int, float] = (0.0, 0, 0, 0.0)
    for shift in (-hour, hour):
        for share in CLOCK_SHARES:
            moved = _same_weekday_errors(_shape_rows(raw, share, shift), rows, group, first_split)
            with np.errstate(invalid="ignore"):
                removed = np.where(np.isfinite(unmoved), unmoved - moved, 0.0)
            k = int(np.argmax(removed))
            if removed[k] > best[0]:
                best = (float(removed[k]), k, shift, share)
    best_removed, split, shift, share = best
    if split == 0 or unmoved[split] <= 0:
        return None
    gain = best_removed / float(unmoved[split])
    if gain < CLOCK_MIN_GAIN:
        return None
    before = _shape_rows(raw[:split], share, shift)
    closer = []
    for j in range(split, days):
        same = group[:split] == group[j]
        closer.append(
            np.sum((rows[j] - before[same].mean(axis=0)) ** 2)
            < np.sum((rows[j] - rows[:split][same].mean(axis=0)) ** 2)
        )
    if np.mean(closer) < CLOCK_MIN_AGREEMENT:
        return None
    return ClockChange(at=first + split * day, shift=shift, share=share, gain=gain)
