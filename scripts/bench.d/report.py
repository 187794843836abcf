"""scripts/bench: the report (Markdown and JSON document): per-case statistics, where ADD's time goes (from the
plugin's own log), the sections of the other modules. Imported by bench.py."""

import os
import re

import agents
import audit
import cgprofile as cg_profile
import faults
import podcache
import podstart
from common import fmt, machine, median, paired, pct


def fmt_paired(p):
    """A paired ratio as `median [low, high]` (its 95 % interval), or `median` alone when too few runs."""
    if not p:
        return "–"
    ci = p.get("ci95")
    return f"{fmt(p['median'])} [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else fmt(p["median"])


def summarize(samples):
    ms = sorted(s.ns / 1e6 for s in samples)
    rss = [s.rss_kb for s in samples]
    return {
        "n": len(ms),
        "median_ms": median(ms), "p99_ms": pct(ms, 99), "min_ms": ms[0], "max_ms": ms[-1],
        "rss_kb_max": max(rss), "rss_kb_median": median(rss),
        "cpu_ms_median": median([s.cpu_s * 1000 for s in samples]),
    }


def breakdown(b):
    """Medians of the plugin's logged pod-lookup / rule-build / restore times (ours only)."""
    res = {}
    pat_lookup = re.compile(r"pod lookup ([0-9.]+) ms")
    pat_built = re.compile(r"rules built in ([0-9.]+) ms")
    pat_step = re.compile(r"(IPv4|IPv6|ipv4|ipv6|v4|v6)\s+\w+ in ([0-9.]+) ms")
    pat_nft = re.compile(r"nftables\): rules built in [0-9.]+ ms, \w+ in ([0-9.]+) ms")
    for c in b.cases:
        if c["impl"] != "ours" or not c["name"].startswith("add-"):
            continue
        try:
            lines = open(b.err_log(c)).read().splitlines()
        except OSError:
            continue
        lk, bl, st = [], [], {}
        for l in lines:
            m = pat_lookup.search(l)
            if m:
                lk.append(float(m.group(1)))
            m = pat_built.search(l)
            if m:
                bl.append(float(m.group(1)))
            for fam, v in pat_step.findall(l):
                st.setdefault(fam, []).append(float(v))
            for v in pat_nft.findall(l):
                st.setdefault("nftables_apply", []).append(float(v))
        if lk or bl:
            res[c["name"]] = {"pod_lookup_ms": median(lk), "rules_built_ms": median(bl),
                              **{f"restore_{k}_ms": median(v) for k, v in st.items()}}
    return res


def report(b, a, extra):
    by = {}
    for c in b.cases:
        by[(c["name"], c["impl"])] = c
    rows = []
    order = []
    for c in b.cases:
        if c["name"] not in order:
            order.append(c["name"])
    peer = "peer" in b.bins
    for name in order:
        for impl in ("ours", "floor"):
            c = by.get((name, impl))
            if not c:
                continue
            s = summarize(c["samples"])
            row = {"case": name, "label": c["label"], "impl": impl, **s}
            if c["floor"]:
                f = summarize(by[(c["floor"], "floor")]["samples"])
                row["floor"] = c["floor"]
                row["floor_median_ms"] = f["median_ms"]
                row["ratio_to_floor"] = s["median_ms"] / f["median_ms"]
            if peer and (name, "peer") in by:
                p = summarize(by[(name, "peer")]["samples"])
                row["peer"] = p
                row["ratio_to_peer"] = s["median_ms"] / p["median_ms"]
                # The same run's two processes, one right after the other: their ratio, run by run.
                row["paired_to_peer"] = paired([x.ns for x in c["samples"]],
                                               [x.ns for x in by[(name, "peer")]["samples"]])
                if c["floor"]:
                    p["ratio_to_floor"] = p["median_ms"] / row["floor_median_ms"]
            rows.append(row)
    m = machine()
    doc = {"machine": m, "binary": {"path": a.bin, "size_bytes": os.path.getsize(a.bin)},
           "peer": {"path": a.peer, "size_bytes": os.path.getsize(a.peer), "label": b.peer_label}
           if a.peer else None,
           "runs": a.runs, "warmup": a.warmup, "wiring": a.wiring, "cases": rows,
           "concurrent": b.burst_results, "breakdown": breakdown(b), "notes": b.notes, **extra}
    return doc


def markdown(doc):
    m = doc["machine"]
    out = []
    out.append(f"Measured {m['date']} on {m['nproc']} × {m['cpu']}, kernel {m['kernel']} (load average at the "
               f"end {m['loadavg_at_end'][0]:.2f}); "
               f"{doc['runs']} runs per case (+{doc['warmup']} warm-up), fresh process per run, "
               f"pods wired by {doc['wiring']}. Binary: {doc['binary']['size_bytes']} bytes "
               f"({doc['binary']['size_bytes'] / 1048576:.2f} MiB)"
               + (f"; {doc['peer']['label']}: {doc['peer']['size_bytes']} bytes" if doc.get("peer") else "") + ".\n")
    peer = doc.get("peer")
    hdr = "| case | median ms | p99 ms | min ms | max ms | peak RSS KiB | floor median ms | × floor |"
    sep = "|---|---:|---:|---:|---:|---:|---:|---:|"
    if peer:
        who = peer.get("label", "peer")
        hdr += (f" {who} median ms | {who} p99 ms | {who} RSS KiB | {who} × floor | ours ÷ {who} (medians) | "
                f"ours ÷ {who}, paired run by run: median [95 % interval] |")
        sep += "---:|---:|---:|---:|---:|---:|"
    if doc["cases"]:
        out += [hdr, sep]
    for r in doc["cases"]:
        label = r["label"] if r["impl"] != "floor" else f"*floor:* {r['label']}"
        line = (f"| {label} | {fmt(r['median_ms'])} | {fmt(r['p99_ms'])} | {fmt(r['min_ms'])} | "
                f"{fmt(r['max_ms'])} | {r['rss_kb_max']} | {fmt(r.get('floor_median_ms'))} | "
                f"{fmt(r.get('ratio_to_floor'))} |")
        if peer:
            p = r.get("peer")
            if p:
                line += (f" {fmt(p['median_ms'])} | {fmt(p['p99_ms'])} | {p['rss_kb_max']} | "
                         f"{fmt(p.get('ratio_to_floor'))} | {fmt(r.get('ratio_to_peer'))} | "
                         f"{fmt_paired(r.get('paired_to_peer'))} |")
            else:
                line += " | | | | | |"
        out.append(line)
    if doc.get("concurrent"):
        serial = {(r["case"], "ours"): r["median_ms"] for r in doc["cases"] if r["impl"] == "ours"}
        serial.update({(r["case"], "peer"): r["peer"]["median_ms"] for r in doc["cases"] if r.get("peer")})
        out += ["", "| concurrent ADDs (redirect) | pods | total ms | amortized ms/pod | ÷ serial median | "
                "own latency median / p99 / max ms | done after burst start, median ms | all succeeded |",
                "|---|---:|---:|---:|---:|---:|---:|---|"]
        for c in doc["concurrent"]:
            s = serial.get((c["serial_case"], c["impl"]))
            c["amortized_over_serial"] = c["per_pod_amortized_ms"] / s if s else None
            out.append(f"| {c['impl']}, {c['backend']} | {c['pods']} | {fmt(c['total_ms'], 1)} | "
                       f"{fmt(c['per_pod_amortized_ms'])} | {fmt(c['amortized_over_serial'])} | "
                       f"{fmt(c['latency_median_ms'])} / {fmt(c['latency_p99_ms'])} / {fmt(c['latency_max_ms'])} | "
                       f"{fmt(c['done_since_burst_median_ms'])} | {'yes' if c['all_succeeded'] else 'NO'} |")
    if doc.get("breakdown"):
        out += ["", "| where ADD's time goes (ours, medians from the plugin's own log) | pod lookup ms | rules built ms | restore ms |",
                "|---|---:|---:|---:|"]
        for k, v in doc["breakdown"].items():
            rs = ", ".join(f"{kk[8:-3]} {fmt(vv)}" for kk, vv in v.items() if kk.startswith("restore_"))
            out.append(f"| {k} | {fmt(v.get('pod_lookup_ms'))} | {fmt(v.get('rules_built_ms'))} | {rs or '–'} |")
    if doc.get("cache"):
        out += ["", podcache.markdown(doc["cache"])]
    for sec in ("installer", "repair"):
        if doc.get(sec):
            out += ["", agents.markdown(sec, doc[sec])]
    if doc.get("audit"):
        out += ["", audit.markdown(doc["audit"])]
    if doc.get("faults"):
        out += ["", faults.markdown(doc["faults"])]
    if doc.get("podstart"):
        out += ["", podstart.markdown(doc["podstart"])]
    if doc.get("profile"):
        out += ["", cg_profile.markdown(doc["profile"])]
    for n in doc.get("notes", []):
        out.append(f"\n- {n}")
    return "\n".join(out) + "\n"
