"""The human-readable table of a benchmark result (a
:class:`~autotune.bench.result.BenchResult` or the dict saved from one): one row per contender,
ratios to XLA and to the floor."""
from __future__ import annotations

from db.records import Status

from autotune.bench.result import LABELS, ORDER, BenchResult
from autotune.report.units import fmt_s


def _rows(result) -> tuple[dict, list[dict]]:
    d = result.to_dict() if isinstance(result, BenchResult) else result
    return d, [d["contenders"][n] for n in ORDER if n in d["contenders"]]


def format_table(result) -> str:
    """The human-readable table of a BenchResult (or its saved dict)."""
    d, rows = _rows(result)
    fl = d["floor"]
    dims = ",".join(f"{k}={v}" for k, v in d["dims"].items())
    lines = [f"{d['workload']}  dims {dims}  {d['dtype']}  on {d['device_name']}  "
             f"({d['rounds']} interleaved rounds, median)"]
    if d.get("search"):
        s = d["search"]
        lines.append(f"no plan was cached: searched {s['budget']} trials first ({s['measured']} "
                     f"measured, {s['pruned']} pruned, {s['failed']} failed; "
                     f"{s['wall_s']:.0f} s)")
    lines.append(f"{'contender':<25} {'median':>10} {'min':>10} {'vs XLA':>7} {'vs floor':>8} "
                 f"{'predicted':>10}  note")
    for c in rows:
        label = LABELS.get(c["name"], c["name"])
        pred = fmt_s(c.get("predicted_s"))
        if c["median_s"] is not None:
            rx = f"{c['ratio_to_xla']:.2f}x" if c.get("ratio_to_xla") else "-"
            rf = f"{c['ratio_to_floor']:.1f}x" if c.get("ratio_to_floor") else "-"
            note = "; ".join(filter(None, [c.get("note"), f"rel err {c['rel_err']:.2g}"
                                           if c.get("rel_err") is not None else ""]))
            mn = fmt_s(c["min_s"]) if len(c["times_s"]) > 1 else "-"
            lines.append(f"{label:<25} {fmt_s(c['median_s']):>10} {mn:>10} {rx:>7} {rf:>8} "
                         f"{pred:>10}  {note}")
        elif c["status"] == Status.TIMED_OUT:
            t = c.get("detail", {}).get("timeout_s")
            med = "> " + fmt_s(t) if t else "-"
            lines.append(f"{label:<25} {med:>10} {'-':>10} {'-':>7} {'-':>8} {pred:>10}  "
                         f"{c.get('note', 'timed out')}")
        else:
            why = {Status.WRONG: "WRONG, not timed", Status.SKIPPED: "skipped",
                   Status.FAILED: "FAILED"}.get(c["status"], c["status"])
            lines.append(f"{label:<25} {'-':>10} {'-':>10} {'-':>7} {'-':>8} {pred:>10}  "
                         f"{why}: {c.get('error', '')}")
    cal = {True: "calibrated", False: "NOT calibrated: run `autotune calibrate`",
           None: "datasheet"}[fl.get("calibrated")]
    peak = fl.get("peak_flops")
    if peak:     # results written before the peak rate was measured lack it
        lines.append(f"floor {fmt_s(fl['floor_s'])} ({fl['bound']}-bound) = max("
                     f"{fl['useful_flops']:.4g} useful flops / {peak / 1e9:.1f} GFLOP/s peak = "
                     f"{fmt_s(fl['compute_s'])}, {fl['compulsory_bytes']:.4g} bytes / "
                     f"{fl['bandwidth'] / 1e9:.1f} GB/s = {fmt_s(fl['memory_s'])}) "
                     f"[{fl['spec']}, {cal}]")
        lines.append(f"  at the library GEMM rate ({fl['gemm_flops'] / 1e9:.1f} GFLOP/s) the "
                     f"same flops take {fmt_s(fl['gemm_floor_s'])}")
    else:
        lines.append(f"floor {fmt_s(fl['floor_s'])} ({fl['bound']}-bound) = max("
                     f"{fl['useful_flops']:.4g} useful flops / {fl['gemm_flops'] / 1e9:.1f} "
                     f"GFLOP/s = {fmt_s(fl['compute_s'])}, {fl['compulsory_bytes']:.4g} bytes / "
                     f"{fl['bandwidth'] / 1e9:.1f} GB/s = {fmt_s(fl['memory_s'])}) "
                     f"[{fl['spec']}, {cal}]")
    bp = d.get("best_plan") or {}
    if bp.get("summary"):
        lines.append(f"best plan: {bp['summary']}")
    return "\n".join(lines)
