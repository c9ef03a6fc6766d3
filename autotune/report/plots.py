"""Plots (optional extra ``plot``: matplotlib, imported only when a plot is drawn).

* :func:`plot_history`: best-so-far time against trial number, measured and predicted, from the
  trials of one plan key;
* :func:`plot_predicted_vs_measured`: the cost model's prediction against the measured time of
  every measured trial, log-log, with Spearman's rank correlation
  (:func:`costmodel.ranking.spearman_rho`);
* :func:`plot_bench`: the ``autotune bench`` bar chart, medians with ratios to XLA.

:func:`plot_all` writes ``history.png`` and ``predicted_vs_measured.png`` for a workload (and
``bench.png`` when a bench record for it exists).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from costmodel.ranking import spearman_rho
from db.records import Status, StoredTrial


class PlotError(ValueError):
    """Nothing to plot, or matplotlib missing."""


# ---- matplotlib ---------------------------------------------------------------------------------
def _figure(w: float = 8, h: float = 5):
    try:
        from matplotlib.figure import Figure
    except Exception as e:
        raise PlotError(f"plots need matplotlib ({type(e).__name__}: {e}); install it with "
                        f"`pip install matplotlib` (or the `plot` extra)") from None
    return Figure(figsize=(w, h), dpi=110, layout="constrained")


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _ordered(rows: list[StoredTrial]) -> list[StoredTrial]:
    """Trials in the order they were run (creation time, then id)."""
    return sorted(rows, key=lambda r: (r.created or "", r.id or 0))


# ---- optimization history -----------------------------------------------------------------------
def history_series(rows: list[StoredTrial]) -> dict:
    """Per trial (1-based): best measured so far, the prediction of that best plan, and each
    trial's own measured / predicted time (None where there is none)."""
    rows = _ordered(rows)
    best_m, best_p = [], []
    bm, bp = math.inf, None
    for r in rows:
        if r.status == Status.OK and r.measured_s is not None and r.measured_s < bm:
            bm, bp = r.measured_s, r.predicted_s
        best_m.append(bm if bm < math.inf else None)
        best_p.append(bp)
    return {"trial": list(range(1, len(rows) + 1)), "best_measured": best_m,
            "best_predicted": best_p,
            "measured": [r.measured_s if r.status == Status.OK else None for r in rows],
            "predicted": [r.predicted_s for r in rows],
            "status": [str(r.status) for r in rows], "name": [r.name for r in rows]}


def plot_history(rows: list[StoredTrial], path, title: str = "") -> Path:
    """Best-so-far (measured, and the prediction for that plan) against trial number."""
    if not rows:
        raise PlotError("no trials to plot")
    s = history_series(rows)
    fig = _figure()
    ax = fig.add_subplot()
    t = np.array(s["trial"])

    def pts(key, mask=None):
        v = [np.nan if x is None else x for x in s[key]]
        v = np.array(v, dtype=float)
        if mask is not None:
            v = np.where(mask, v, np.nan)
        return v
    status = np.array(s["status"])
    ax.scatter(t, pts("measured"), s=14, color="tab:blue", alpha=0.45, label="measured (trial)")
    ax.scatter(t, pts("predicted", status == "ok"), s=14, marker="x", color="tab:orange",
               alpha=0.6, label="predicted (measured trial)")
    ax.scatter(t, pts("predicted", status != "ok"), s=14, marker="x", color="0.6", alpha=0.6,
               label="predicted (pruned / failed)")
    ax.step(t, pts("best_measured"), where="post", color="tab:blue", lw=2,
            label="best measured so far")
    ax.step(t, pts("best_predicted"), where="post", color="tab:orange", lw=1.5, ls="--",
            label="prediction for that plan")
    for i, n in enumerate(s["name"]):
        if n and s["measured"][i] is not None:
            ax.annotate(n, (t[i], s["measured"][i]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xlabel("trial")
    ax.set_ylabel("time per run (s)")
    ax.set_title(title or "optimization history")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    return _save(fig, path)


# ---- predicted vs measured ----------------------------------------------------------------------
def predicted_measured(rows: list[StoredTrial]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(predicted, measured, names) of the measured trials that have both, one per candidate."""
    seen: dict[str, tuple[float, float, str]] = {}
    for r in _ordered(rows):
        if r.status != Status.OK or r.measured_s is None or r.predicted_s is None:
            continue
        if not (math.isfinite(r.predicted_s) and r.predicted_s > 0):
            continue
        key = json.dumps(r.candidate, sort_keys=True)     # one point per distinct candidate
        if key not in seen or r.measured_s < seen[key][1]:
            seen[key] = (r.predicted_s, r.measured_s, r.name)
    vals = list(seen.values())
    return (np.array([v[0] for v in vals]), np.array([v[1] for v in vals]),
            [v[2] for v in vals])


def plot_predicted_vs_measured(rows: list[StoredTrial], path, title: str = ""
                               ) -> tuple[Path, float]:
    """Log-log scatter with the y = x line and Spearman's rho; returns (path, rho)."""
    pred, meas, names = predicted_measured(rows)
    if len(pred) == 0:
        raise PlotError("no measured trial with a prediction to plot")
    rho = spearman_rho(pred, meas)
    fig = _figure(6.5, 6)
    ax = fig.add_subplot()
    ax.scatter(pred, meas, s=18, alpha=0.7, color="tab:blue")
    for p, m, n in zip(pred, meas, names):
        if n:
            ax.annotate(n, (p, m), fontsize=8, xytext=(4, 2), textcoords="offset points")
            ax.scatter([p], [m], s=40, facecolors="none", edgecolors="tab:red")
    lo = float(min(pred.min(), meas.min())) / 1.5
    hi = float(max(pred.max(), meas.max())) * 1.5
    ax.plot([lo, hi], [lo, hi], color="0.5", ls="--", lw=1, label="predicted = measured")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted (s)")
    ax.set_ylabel("measured (s)")
    rtxt = "n/a" if math.isnan(rho) else f"{rho:.3f}"
    ax.set_title((title + "\n" if title else "") + f"Spearman's rho = {rtxt}  (n = {len(pred)})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path), rho


# ---- the bench bar chart ------------------------------------------------------------------------
def plot_bench(result, path) -> Path:
    """Horizontal bars of each contender's median (min as a tick), labelled with the ratio to
    XLA; the floor as a dashed line; a timed-out contender as a hatched bar at its timeout;
    wrong, failed and skipped contenders as a row of text with the reason."""
    from autotune.bench.result import LABELS, ORDER, BenchResult
    from autotune.report.units import fmt_s
    d = result.to_dict() if isinstance(result, BenchResult) else result
    rows = [d["contenders"][n] for n in ORDER if n in d["contenders"]]
    timed = [c for c in rows if c.get("median_s") is not None]
    late = [c for c in rows
            if c["status"] == Status.TIMED_OUT and c.get("detail", {}).get("timeout_s")]
    if not timed and not late:
        raise PlotError("no contender was timed")
    fl = d.get("floor", {}).get("floor_s")
    times = [c["median_s"] for c in timed] + [c["detail"]["timeout_s"] for c in late]
    lo, hi = min(times + ([fl] if fl else [])) / 2, max(times) * 12
    fig = _figure(9, 1.4 + 0.5 * len(rows))
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1]
    colours = {"plan": "tab:blue", "peer": "tab:green"}
    for yi, c in zip(y, rows):
        if c in late:
            t = c["detail"]["timeout_s"]
            ax.barh(yi, t, color="0.85", hatch="//", edgecolor="0.4")
            ax.text(t, yi, f"  > {fmt_s(t)}: timed out (predicted {fmt_s(c.get('predicted_s'))})",
                    va="center", fontsize=8)
        elif c in timed:
            best = c["name"] == "best"
            ax.barh(yi, c["median_s"], color=colours.get(c["kind"], "tab:gray"),
                    edgecolor="black" if best else "none", lw=1.5 if best else 0)
            if len(c.get("times_s", ())) > 1:
                ax.plot([c["min_s"]], [yi], marker="|", color="black", ms=14)
            r = c.get("ratio_to_xla")
            txt = f"  {fmt_s(c['median_s'])}" + (f"  ({r:.2f}x XLA)" if r else "")
            if c.get("note") == "one run":
                txt += "  one run"
            ax.text(c["median_s"], yi, txt, va="center", fontsize=8)
        else:
            why = (c.get("error") or "")[:80]
            ax.text(lo * 1.1, yi, f"{c['status']}: {why}", va="center", fontsize=7, color="0.35")
    ax.set_yticks(y, [LABELS.get(c["name"], c["name"]) for c in rows])
    ax.set_xscale("log")
    if fl:
        ax.axvline(fl, color="tab:red", ls="--", lw=1)
        ax.text(fl, y.max() + 0.45, f" floor {fmt_s(fl)}", color="tab:red", fontsize=8,
                va="bottom")
    ax.set_xlim(lo, hi)
    ax.set_ylim(-0.7, len(rows) - 0.1)
    ax.set_xlabel(f"median time per run (s, log scale; {d['rounds']} interleaved rounds; "
                  f"| = min)")
    dims = ",".join(f"{k}={v}" for k, v in d["dims"].items())
    ax.set_title(f"{d['workload']} {dims} on {d['device_name']}", fontsize=10)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    return _save(fig, path)


def plot_summary(rows, path) -> Path:
    """`bench --all`: per workload, the tuned plan's time over its fastest peer's (log scale,
    1 = parity, left of it = the plan wins) and over the heuristic plan's."""
    named = [r for r in rows if r.vs_best_peer is not None]
    if not named:
        raise PlotError("no workload has both a tuned plan and a peer timed")
    fig = _figure(8, 1.2 + 0.45 * len(named))
    ax = fig.add_subplot()
    y = np.arange(len(named))[::-1]
    ax.barh(y + 0.18, [r.vs_best_peer for r in named], height=0.36, color="tab:blue",
            label="best plan / fastest peer")
    ax.barh(y - 0.18, [r.vs_heuristic or np.nan for r in named], height=0.36,
            color="tab:orange", label="best plan / heuristic plan")
    for yi, r in zip(y, named):
        ax.text(r.vs_best_peer, yi + 0.18, f"  {r.vs_best_peer:.2f}x {r.best_peer}",
                va="center", fontsize=7)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_xscale("log")
    ax.set_yticks(y, [r.workload for r in named])
    ax.set_xlabel("time ratio (log scale; < 1: the tuned plan is faster)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    return _save(fig, path)


# ---- everything for one workload ----------------------------------------------------------------
def key_trials(w, device: str = "cpu", db=None) -> tuple[str, list[StoredTrial]]:
    """(plan key, trials) of ``w`` on this device with the current library versions."""
    from db.keys import PlanKey

    from autotune.api import open_db
    from autotune.backends.factory import resolve
    key = PlanKey.for_env(w.hash, resolve(device)).key
    store = open_db(db, create=False)
    try:
        return key, store.trials(key)
    finally:
        store.close()


def find_bench_json(w, device: str = "cpu", results_dir=None) -> Path | None:
    """The saved ``autotune bench`` record of this workload, dims and device, if any."""
    from autotune.bench.result import DEFAULT_OUT, result_name
    p = Path(results_dir if results_dir is not None else DEFAULT_OUT) / result_name(w, device)
    return p if p.exists() else None


def plot_all(w, out_dir, device: str = "cpu", db=None, results_dir=None) -> dict[str, Path]:
    """history.png, predicted_vs_measured.png (and bench.png) for ``w``; returns what was
    written, by plot name, plus ``rho`` (a float) when the scatter was drawn."""
    key, rows = key_trials(w, device, db)
    if not rows:
        raise PlotError(f"no trials of {w.name} ({','.join(f'{k}={v}' for k, v in w.dims)}) on "
                        f"this {device} with these library versions; run `autotune search` "
                        f"first")
    out = Path(out_dir)
    os.makedirs(out, exist_ok=True)
    dims = ",".join(f"{k}={v}" for k, v in w.dims)
    title = f"{w.name} {dims} ({device}, key {key[:12]}, {len(rows)} trials)"
    written: dict = {"history": plot_history(rows, out / "history.png", title)}
    try:
        written["predicted_vs_measured"], written["rho"] = plot_predicted_vs_measured(
            rows, out / "predicted_vs_measured.png", f"{w.name} {dims} ({device})")
    except PlotError:
        pass
    bench = find_bench_json(w, device, results_dir)
    if bench is not None:
        written["bench"] = plot_bench(json.loads(bench.read_text()), out / "bench.png")
    return written


# ---- model-check --------------------------------------------------------------------------------
def plot_model_check(d: dict, path) -> Path:
    """Two log-log panels of ``autotune model-check``'s JSON (``d``): analytic and corrected
    (cross-fitted) predictions against the measured medians, named plans circled, the figures
    in the titles."""
    pts = [p for p in d["points"] if p["measured_s"] is not None]
    if not pts:
        raise PlotError("no candidate was measured")
    fig = _figure(11, 5.5)
    meas = np.array([p["measured_s"] for p in pts])
    for i, (key, label) in enumerate((("predicted_s", "analytic"), ("corrected_s", "corrected"))):
        ax = fig.add_subplot(1, 2, i + 1)
        pred = np.array([p[key] for p in pts], dtype=float)
        ax.scatter(pred, meas, s=18, alpha=0.7, color="tab:blue" if i == 0 else "tab:green")
        for p, x, m in zip(pts, pred, meas):
            if p["name"]:
                ax.annotate(p["name"], (x, m), fontsize=8, xytext=(4, 2),
                            textcoords="offset points")
                ax.scatter([x], [m], s=40, facecolors="none", edgecolors="tab:red")
        lo = float(min(pred.min(), meas.min())) / 1.5
        hi = float(max(pred.max(), meas.max())) * 1.5
        ax.plot([lo, hi], [lo, hi], color="0.5", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"{label} prediction (s)")
        ax.set_ylabel("measured median (s)")
        sfx = "" if i == 0 else "_corrected"
        figs = [(n, d.get(n + sfx)) for n in ("spearman_rho", "kendall_tau", "top1_regret")]
        ax.set_title(f"{label}: " + "  ".join(
            f"{n.split('_')[0]} {'-' if v is None else f'{v:.2f}'}" for n, v in figs),
            fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    dims = ",".join(f"{k}={v}" for k, v in d["dims"].items())
    fig.suptitle(f"{d['workload']} {dims} on {d['device_name']}: {d['samples']} candidates, "
                 f"{d['rounds']} rounds", fontsize=10)
    return _save(fig, path)
