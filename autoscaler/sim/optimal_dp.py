"""The recursion behind ``optimal`` (:mod:`autoscaler.sim.optimal`), compiled with numba.

Kept apart so the driver reads as plain Python; this file is the inner loop only. Labels are
kept per size in ``L`` slots, sorted by backlog, cost strictly falling (a Pareto front). A step
is: resizes launched from the labels of the step before (landing ``m`` steps later), each
label served one step at its size, arrivals merged in. Merging groups labels of one size by
cell of ``backlog − X[size, t]`` (a quantity that staying at that size never changes), keeps
the cheapest of a cell (``relaxed``: the least cost and the least backlog of the cell), then the
Pareto front; past ``L`` labels, the schedule search keeps ``L`` spread over the front and the
bound merges neighbours (least cost, least backlog).

Resizes are most of the work (every label may go to every other size). A resize to a size
pays its downtime at the larger of the two sizes, so the sources of a resize to size j are
two fronts: the labels of the smaller sizes by cost, those of the larger sizes by cost plus
their downtime; a label off its front is dominated (no less backlog, no less cost) and would
be dropped by the merge, so it is never built. The fronts of "every size below j" and
"every size above j" are grown one size at a time.

numba compiles on first use (a few seconds) and caches the result next to this file; the
functions release the GIL, so the schedule's search and the bound's run on two threads.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_TOL = 1e-9


@njit(cache=True, nogil=True)
def _merge(  # numba infers the types from the calls
    cB,
    cC,
    cPar,
    cRes,
    cV,
    n,
    x_it,
    width,
    L,
    relaxed,
    oB,
    oC,
    oPar,
    oRes,
    oV,
    tmpB,
    tmpC,
    tmpP,
    tmpR,
    tmpV,
    tmpW,
):
    """Candidates (sorted by backlog) of size i → at most L labels in oB/oC/oPar/oRes."""
    k = 0
    j = 0
    inv = 1.0 / width
    for q in range(n):
        tmpV[q] = math.floor((cB[q] - x_it) * inv)  # cell, kept here until labels are written
    while j < n:
        if not math.isfinite(cC[j]):
            j += 1
            continue
        cell = tmpV[j]
        best = j
        low = cB[j]
        j2 = j + 1
        while j2 < n and tmpV[j2] == cell:
            if cC[j2] < cC[best]:
                best = j2
            j2 += 1
        c = cC[best]
        if k == 0 or c < tmpC[k - 1] - _TOL * (1.0 + abs(c)):
            tmpB[k] = low if relaxed else cB[best]
            tmpC[k] = c
            tmpP[k] = cPar[best]
            tmpR[k] = cRes[best]
            tmpW[k] = cV[best]
            k += 1
        j = j2
    if k <= L:
        for q in range(k):
            oB[q], oC[q], oPar[q], oRes[q], oV[q] = tmpB[q], tmpC[q], tmpP[q], tmpR[q], tmpW[q]
        return k
    for q in range(L):  # L groups of neighbours along the front
        lo = (q * k) // L
        hi = ((q + 1) * k) // L - 1
        if relaxed:
            oB[q], oC[q], oPar[q], oRes[q], oV[q] = tmpB[lo], tmpC[hi], tmpP[hi], tmpR[hi], tmpW[hi]
        else:
            pick = lo if q == 0 else hi
            oB[q], oC[q], oPar[q] = tmpB[pick], tmpC[pick], tmpP[pick]
            oRes[q], oV[q] = tmpR[pick], tmpW[pick]
    return L


@njit(cache=True, nogil=True)
def _front(backlog, key, prev, lo, hi, first, stop, out, at):
    """The front of ``prev[lo:hi]`` (source indices, by backlog, key strictly falling) and
    the sources ``first .. stop − 1`` (by backlog): those whose key is below every key before
    them, written to ``out[at:]``; returns where they end."""
    best = np.inf
    a = lo
    s = first
    while a < hi or s < stop:
        if s >= stop or (a < hi and backlog[prev[a]] <= backlog[s]):
            x = prev[a]
            a += 1
        else:
            x = s
            s += 1
        if key[x] < best:
            best = key[x]
            out[at] = x
            at += 1
    return at


@njit(cache=True, nogil=True)
def solve(  # numba infers the types from the call
    rates,
    cap,
    sizes,
    X,
    width,
    allowed,
    too_old,
    cum,
    m,
    up_last,
    dt,
    gpw,
    rescale_s,
    lam,
    relaxed,
    L,
    record,
):
    """Returns (best cost, final label (size, slot), back pointers and resize flags of every
    label kept — those of step t, size i from ``offsets[t·W + i]`` —, and the violating steps
    along the best label)."""
    W = len(sizes)
    T = len(rates)
    curB = np.zeros((W, L))
    curV = np.zeros((W, L), dtype=np.int64)
    curC = np.full((W, L), np.inf)
    curN = np.zeros(W, dtype=np.int64)
    for i in range(W):
        curC[i, 0] = 0.0
        curN[i] = 1
    ring = max(1, m)
    pB = np.zeros((ring, W, L))
    pC = np.full((ring, W, L), np.inf)
    pPar = np.zeros((ring, W, L), dtype=np.int32)
    pV = np.zeros((ring, W, L), dtype=np.int64)
    pN = np.zeros((ring, W), dtype=np.int64)
    offsets = np.zeros(T * W + 1 if record else 1, dtype=np.int64)
    back = np.zeros(T * W * 4 if record else 1, dtype=np.int32)
    res = np.zeros(len(back), dtype=np.bool_)
    used = 0
    cap_n = W * L + 2 * L
    cB = np.zeros(cap_n)
    cC = np.zeros(cap_n)
    cPar = np.zeros(cap_n, dtype=np.int32)
    cRes = np.zeros(cap_n, dtype=np.bool_)
    cV = np.zeros(cap_n, dtype=np.int64)
    tV = np.zeros(cap_n, dtype=np.int64)
    tW = np.zeros(cap_n, dtype=np.int64)
    sV = np.zeros(cap_n, dtype=np.int64)
    tB = np.zeros(cap_n)
    tC = np.zeros(cap_n)
    tP = np.zeros(cap_n, dtype=np.int32)
    tR = np.zeros(cap_n, dtype=np.bool_)
    sB = np.zeros(cap_n)
    sC = np.zeros(cap_n)
    sI = np.zeros(cap_n, dtype=np.int64)
    sL = np.zeros(cap_n, dtype=np.int64)
    srcV = np.zeros(cap_n, dtype=np.int64)
    srcBase = np.zeros(cap_n)
    keyAbove = np.zeros(cap_n)
    first = np.zeros(W + 1, dtype=np.int64)
    above = np.zeros(W * cap_n, dtype=np.int64)
    above_at = np.zeros(W, dtype=np.int64)
    above_end = np.zeros(W, dtype=np.int64)
    below = np.zeros(cap_n, dtype=np.int64)
    spare = np.zeros(cap_n, dtype=np.int64)
    newB = np.zeros((W, L))
    newC = np.full((W, L), np.inf)
    newN = np.zeros(W, dtype=np.int64)
    newPar = np.zeros((W, L), dtype=np.int32)
    newRes = np.zeros((W, L), dtype=np.bool_)
    newV = np.zeros((W, L), dtype=np.int64)
    oRes = np.zeros(L, dtype=np.bool_)
    full = m if up_last == 0.0 else m - 1
    grown = np.zeros(max(1, m))
    dropped = 0
    for t in range(T):
        # -- all labels of the step before: the sources of resizes ------------------------------
        # Labels of one size lie together, sorted by backlog (as the merge leaves them).
        ns = 0
        for i in range(W):
            first[i] = ns
            for q in range(curN[i]):
                sB[ns] = curB[i, q]
                sC[ns] = curC[i, q]
                sV[ns] = curV[i, q]
                sI[ns] = i
                sL[ns] = q
                ns += 1
        first[W] = ns
        if m == 0 and t > 0:
            order = np.argsort(sB[:ns])
        launch = m > 0 and t > 0 and t + m - 1 < T
        if launch:
            end = t + m - 1
            for q in range(full):
                grown[q] = cum[t + q + 1] - cum[t]
            slot = end % ring
            dcost = gpw * rescale_s
            for s in range(ns):  # violating steps while down, and the cost so far
                viol = 0
                for q in range(full):
                    if sB[s] + grown[q] > allowed[t + q] + 1e-9:
                        viol += 1
                srcV[s] = viol
                srcBase[s] = sC[s] + lam * viol
                keyAbove[s] = srcBase[s] + dcost * sizes[sI[s]]
            # A resize to size j from a smaller size pays its downtime at j's GPUs, from a
            # larger one at its own. On each side a source with no less backlog and no less
            # cost than another is dominated (the merge would drop it), so only two fronts
            # are candidates: of the sizes below j by cost, of those above by cost + downtime.
            above_end[W - 1] = 0
            above_at[W - 1] = 0
            for j in range(W - 2, -1, -1):
                above_at[j] = above_end[j + 1]
                above_end[j] = _front(
                    sB,
                    keyAbove,
                    above,
                    above_at[j + 1],
                    above_end[j + 1],
                    first[j + 1],
                    first[j + 2],
                    above,
                    above_at[j],
                )
            below_n = 0
            for j in range(W):
                if j > 0:
                    below_n = _front(
                        sB, srcBase, below, 0, below_n, first[j - 1], first[j], spare, 0
                    )
                    below[:below_n] = spare[:below_n]
                n = 0
                wj = sizes[j]
                a = 0
                z = above_at[j]
                while a < below_n or z < above_end[j]:
                    if z >= above_end[j] or (a < below_n and sB[below[a]] <= sB[above[z]]):
                        s = below[a]
                        a += 1
                        c = srcBase[s] + dcost * wj
                    else:
                        s = above[z]
                        z += 1
                        c = keyAbove[s]
                    b = sB[s]
                    vv = sV[s] + srcV[s]
                    if up_last == 0.0:
                        nb = b + grown[full - 1]
                    else:
                        down = cum[end] - cum[t] + rates[end] * (dt - up_last)
                        nb = max(0.0, b + down + (rates[end] - cap[j]) * up_last)
                        c += gpw * up_last * wj
                        if nb > allowed[end] + 1e-9:
                            c += lam
                            vv += 1
                    if nb > too_old[end]:
                        if relaxed:
                            nb = too_old[end]
                        else:
                            continue
                    cB[n] = nb
                    cC[n] = c
                    cPar[n] = sI[s] * L + sL[s]
                    cRes[n] = True
                    cV[n] = vv
                    n += 1
                pN[slot, j] = _merge(
                    cB,
                    cC,
                    cPar,
                    cRes,
                    cV,
                    n,
                    X[j, end],
                    width[j],
                    L,
                    relaxed,
                    pB[slot, j],
                    pC[slot, j],
                    pPar[slot, j],
                    oRes,
                    pV[slot, j],
                    tB,
                    tC,
                    tP,
                    tR,
                    tV,
                    tW,
                )
        # -- serve the step at each size; merge the resizes that end with it ----------------
        for i in range(W):
            n = 0
            if m == 0 and t > 0:  # free, instant resizes: any label may continue at size i
                for o in range(ns):
                    s = order[o]
                    cB[n] = sB[s]
                    cC[n] = sC[s]
                    cPar[n] = sI[s] * L + sL[s]
                    cRes[n] = False
                    cV[n] = sV[s]
                    n += 1
            else:
                for q in range(curN[i]):
                    cB[n] = curB[i, q]
                    cC[n] = curC[i, q]
                    cPar[n] = i * L + q
                    cRes[n] = False
                    cV[n] = curV[i, q]
                    n += 1
            for q in range(n):
                b = max(0.0, cB[q] + (rates[t] - cap[i]) * dt)
                c = cC[q] + sizes[i] * gpw * dt
                if b > allowed[t] + 1e-9:
                    c += lam
                    cV[q] += 1
                if b > too_old[t]:
                    if relaxed:
                        b = too_old[t]
                    else:
                        c = np.inf
                        dropped += 1
                cB[q] = b
                cC[q] = c
            if m > 0:
                slot = t % ring
                for q in range(pN[slot, i]):  # arrivals, merged in by backlog
                    cB[n] = pB[slot, i, q]
                    cC[n] = pC[slot, i, q]
                    cPar[n] = pPar[slot, i, q]
                    cRes[n] = True
                    cV[n] = pV[slot, i, q]
                    n += 1
                pN[slot, i] = 0
                idx = np.argsort(cB[:n])
                for q in range(n):
                    tB[q], tC[q], tP[q], tR[q] = cB[idx[q]], cC[idx[q]], cPar[idx[q]], cRes[idx[q]]
                    tV[q] = cV[idx[q]]
                for q in range(n):
                    cB[q], cC[q], cPar[q], cRes[q], cV[q] = tB[q], tC[q], tP[q], tR[q], tV[q]
            elif m == 0 and t > 0:
                pass  # already sorted by backlog: serving keeps the order
            newN[i] = _merge(
                cB,
                cC,
                cPar,
                cRes,
                cV,
                n,
                X[i, t],
                width[i],
                L,
                relaxed,
                newB[i],
                newC[i],
                newPar[i],
                newRes[i],
                newV[i],
                tB,
                tC,
                tP,
                tR,
                tV,
                tW,
            )
        for i in range(W):
            curN[i] = newN[i]
            for q in range(L):
                curB[i, q] = newB[i, q]
                curC[i, q] = newC[i, q] if q < newN[i] else np.inf
                curV[i, q] = newV[i, q]
            if record:
                if used + newN[i] > len(back):
                    grow = np.zeros(2 * len(back) + L, dtype=np.int32)
                    grow[:used] = back[:used]
                    back = grow
                    grow_r = np.zeros(len(back), dtype=np.bool_)
                    grow_r[:used] = res[:used]
                    res = grow_r
                for q in range(newN[i]):
                    back[used + q] = newPar[i, q]
                    res[used + q] = newRes[i, q]
                used += newN[i]
                offsets[t * W + i + 1] = used
    best = np.inf
    bi = 0
    bq = 0
    for i in range(W):
        for q in range(curN[i]):
            if curC[i, q] < best:
                best = curC[i, q]
                bi = i
                bq = q
    return best, bi, bq, back[:used], res[:used], offsets, curV[bi, bq]
