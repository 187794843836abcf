"""scripts/bench --scale: the structural checks and the report (scale.md's tables, scale.svg). Imported by
scale.py.
"""

import subprocess

from common import BenchError, median, pct


def stats_ms(vals):
    s = sorted(vals)
    if not s:
        return None
    return {"n": len(s), "p50": median(s), "p99": pct(s, 99), "max": s[-1]}


KEYS = ("nodes", "cache", "pods", "api_requests_per_pod_start", "tls_handshakes_per_pod_start", "watches")


def check(runs):
    """The structural facts (never timings): keys, watches = N, requests per pod start with and without cache."""
    bad = []
    for r in runs:
        what = f"N={r['nodes']} cache={'on' if r['cache'] else 'off'}"
        bad += [f"{what}: no {k}" for k in KEYS if k not in r]
        if r["watches"] != r["nodes"]:
            bad.append(f"{what}: {r['watches']} watches, expected {r['nodes']}")
        if r["cache"] and r["api_requests_per_pod_start"] > 0.01:
            bad.append(f"{what}: {r['api_requests_per_pod_start']:.4f} API requests per pod start (> 0.01): "
                       f"{r['double_requests']}, lookups {r['pod_lookups']}")
        if not r["cache"] and (r["api_gets_per_pod_start"] < 1 or r["tls_handshakes_per_pod_start"] < 1):
            bad.append(f"{what}: {r['api_gets_per_pod_start']:.3f} GETs and {r['tls_handshakes_per_pod_start']:.3f} "
                       "TLS handshakes per pod start (expected >= 1 each)")
    if bad:
        raise BenchError("scale check failed:\n  " + "\n  ".join(bad))


def f(v, nd=2):
    return "–" if v is None else f"{v:,.{nd}f}"


def markdown(doc):
    rows = ["| N nodes | pod cache | pods | API req / pod start (GET / LIST / WATCH) | TLS handshakes / pod start | "
            "watches | double CPU s / 1,000 pod starts (net of creating them) | pod → node cache p50 / p99 ms | "
            "agent RSS median / max KiB | agent idle CPU median / max % | ADD p50 / p99 ms (fresh netns) |",
            "|---:|:---:|---:|---|---:|---:|---|---|---|---|---|"]
    for r in doc["runs"]:
        prop = r["cache_propagation_ms"]
        add = r["add_ms"] or {}
        rows.append(
            f"| {r['nodes']:,} | {'on' if r['cache'] else 'off'} | {r['pods']:,} | "
            f"{r['api_requests_per_pod_start']:.4f} ({r['api_gets_per_pod_start']:.4f} / "
            f"{r['api_lists_per_pod_start']:.4f} / {r['api_watches_per_pod_start']:.4f}) | "
            f"{r['tls_handshakes_per_pod_start']:.4f} | {r['watches']:,} | "
            f"{f(r['double_cpu_s_per_1000_pod_starts'])} ({f(r['double_cpu_s_per_1000_pod_starts_net_of_creates'])}) | "
            f"{f(prop['p50']) + ' / ' + f(prop['p99']) if prop else '–'} | "
            f"{r['agent_rss_kb']['median']:,.0f} / {r['agent_rss_kb']['max']:,} | "
            f"{f(r['agent_idle_cpu_percent']['median'], 3)} / {f(r['agent_idle_cpu_percent']['max'], 3)} | "
            f"{f(add.get('p50'))} / {f(add.get('p99'))} |")
    rows += ["", "| N nodes | pod cache | agents started (all ready and watching) s | start → ready p50 / p99 ms | "
             "watch first response p50 / p99 ms | watch initial list p50 / p99 ms | ADD records relayed / pods | "
             "pod lookups by source | ADD p50 / p99 ms (re-ADD, pool) | storm s (pod starts / s) |",
             "|---:|:---:|---:|---|---|---|---|---|---|---|"]
    for r in doc["runs"]:
        def pp(k):
            v = r[k]
            return f"{f(v['p50'], 1)} / {f(v['p99'], 1)}" if v else "–"
        # Every source's series is exported from the start; the table names the ones that counted.
        lookups = ", ".join(f"{k} {v:,}" for k, v in sorted(r["pod_lookups"].items()) if v) or "none"
        rows.append(
            f"| {r['nodes']:,} | {'on' if r['cache'] else 'off'} | {f(r['agents_start_s'], 1)} | {pp('startup_ready_ms')} | "
            f"{pp('watch_first_response_ms')} | {pp('watch_initial_list_ms')} | {r['relayed_add_records']:,} / "
            f"{r['pods']:,} | {lookups} | {pp('pool_add_ms')} | {f(r['storm_wall_s'], 1)} "
            f"({f(r['pod_starts_per_s'], 0)}) |")
    m = doc["machine"]
    load = ", ".join(f"{x:.1f}" for x in m["loadavg_at_end"])
    return "\n".join([
        f"Scale simulation, {doc['date']}: `scripts/bench --scale {doc['scale']}{' --quick' if doc['quick'] else ''}`, "
        f"{m['nproc']} CPUs ({m['cpu']}), load average {load} at the end, {doc['wall_s']:.0f} s in all.",
        "", *rows, ""])


def picture(doc, path):
    """scale.svg: what a user of the pod cache gets, per N, with it and without it: API requests per pod start
    (the headline: 0 with the cache, drawn above the axis and labelled), the pod start's own latency (ADD p50 in
    a fresh network namespace), the API server's CPU and the agent's memory. The date, commit and command are
    on the figure."""
    import matplotlib
    matplotlib.use("Agg")
    # Text stays text (a smaller file that diffs), and no timestamp in it.
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["svg.hashsalt"] = "scale"
    import matplotlib.pyplot as plt
    panels = (
        ("Kubernetes API requests per pod start", "requests", lambda r: r["api_requests_per_pod_start"], "{:.2f}"),
        ("pod start: ADD latency (p50, fresh netns)", "ms", lambda r: (r.get("add_ms") or {}).get("p50"), "{:.1f}"),
        ("API server CPU per 1,000 pod starts", "CPU seconds", lambda r: r["double_cpu_s_per_1000_pod_starts"],
         "{:.2f}"),
        ("install-cni memory (RSS, median)", "MiB", lambda r: r["agent_rss_kb"]["median"] / 1024, "{:.1f}"),
    )
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.6))
    axes = axes.flatten()
    top = [0.0] * len(panels)
    # Value labels: the line without the cache above its points, the line with it below (they never overlap).
    lines = ((False, "o--", "tab:blue", "pod cache off (upstream's behaviour: one API GET per pod start)", 7, "bottom"),
             (True, "s-", "tab:orange", "pod cache on (the node's agent answers from one watch)", -7, "top"))
    for cache, style, color, label, dy, va in lines:
        rs = sorted((r for r in doc["runs"] if r["cache"] == cache), key=lambda r: r["nodes"])
        if not rs:
            continue
        for i, (_, _, get, fmt) in enumerate(panels):
            pts = [(r["nodes"], get(r)) for r in rs if get(r) is not None]
            if not pts:
                continue
            xs, ys = zip(*pts)
            # Markers are not clipped and sit above the axes, so a line at 0 shows in full.
            axes[i].plot(xs, ys, style, color=color, label=label, clip_on=False, zorder=3)
            for x, y in pts:
                axes[i].annotate(fmt.format(y), (x, y), textcoords="offset points", xytext=(0, dy),
                                 ha="center", va=va, fontsize=8, color=color, annotation_clip=False)
            top[i] = max(top[i], *ys)
    for ax, t, (title, ylabel, _, _) in zip(axes, top, panels):
        ax.set_xscale("log")
        ax.set_xlabel("nodes (N install-cni agents)")
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel)
        t = max(t, 1e-9)
        # Room below 0 (the cache's line at 0 and its labels stay above the x-axis) and above the top label.
        ax.set_ylim(-0.2 * t, t * 1.3)
        ax.axhline(0, color="0.6", linewidth=0.8, zorder=1)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower left", ncol=1, fontsize=9, frameon=False)
    r0 = doc["runs"][0]
    m = doc["machine"]
    fig.suptitle(f"{r0['pods'] // r0['nodes']} pod starts per node against one HTTPS Kubernetes API server "
                 f"(tests/kube-double), N agents on {m['nproc']} CPUs", fontsize=11)
    commit = doc.get("commit") or "unknown commit"
    fig.text(0.99, 0.005, f"{doc['date']}, commit {commit}: scripts/bench --scale {doc['scale']}"
             f"{' --quick' if doc.get('quick') else ''}", ha="right", va="bottom", fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.1, 1, 0.97))
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def commit_of(repo):
    """The checked-out commit (12 hex digits), with '+changes' when the work tree differs; None without git."""
    try:
        c = subprocess.run(["git", "-C", repo, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return c + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None
