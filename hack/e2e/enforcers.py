#!/usr/bin/env python3
"""Which component enforced each egress verdict of one e2e run.

The probe only sees its own side: a refused connection looks the same
whoever refused it. This joins the run's JUnit (the verdicts) with what the
node saw of the probe pod's packets: hack/e2e.sh's witness table (nft table
inet sandprobe_e2e_witness) records each new connection from a pod at three
points of the forward hook:

  pre   priority -30: before anything on the node filters it
  mid   priority  -5: after the cluster's safety net (inet sandprobe_cluster, -10)
  post  priority +10: after kube-router's iptables (ip filter FORWARD, 0)

so a connection in mid but not in post was stopped by kube-router's
NetworkPolicy, one in pre but not in mid by the safety net, and one in post
left the node for the lab (where, in engine mode, nothing filters it: the
proxy and the targets themselves answer).

  enforcers.py --junit RUN.xml --witness WITNESS.json --lab-json lab.json \
      --probe-ip IP [--probe-ip IP] [--expect healthy]

--expect healthy: exit 1 unless every must-fail verdict passed and was
enforced by what the e2e cluster promises (direct attempts by kube-router,
attempts through the proxy by the proxy's deny, arbitrary names by the
resolver).
"""
import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET

KUBE_ROUTER = "kube-router's NetworkPolicy"
SAFETY_NET = "the cluster's safety net"
PROXY = "the proxy's deny"
RESOLVER = "the lab resolver"
NOBODY = "nobody"


def witness_sets(path):
    doc = json.load(open(path))
    sets = {"pre": set(), "mid": set(), "post": set()}
    for item in doc.get("nftables", []):
        s = item.get("set")
        if not s or s.get("name") not in sets:
            continue
        for e in s.get("elem", []):
            c = e["concat"] if "concat" in e else e.get("elem", {}).get("val", {}).get("concat")
            if c:
                sets[s["name"]].add((c[0], c[1], str(c[2]), int(c[3])))
    return sets


def lab_addresses(path):
    lab = json.load(open(path))
    names = {}
    for group in ("allowed", "blocked"):
        for h in lab.get(group, []):
            names[h["name"]] = h["ipv4"]
    names[lab["proxy"]["name"]] = lab["proxy"]["ipv4"]
    names[lab["resolver"]["name"]] = lab["resolver"]["ipv4"]
    if "metadata" in lab and isinstance(lab["metadata"], dict):
        md = lab["metadata"]
        if "name" in md and "ipv4" in md:
            names[md["name"]] = md["ipv4"]
    return names, lab["proxy"]["ipv4"], int(lab["proxy"]["port"])


def verdicts(path):
    for suite in ET.parse(path).getroot().iter("testsuite"):
        for case in suite.iter("testcase"):
            if case.get("classname") != "sandprobe.egress":
                continue
            status = "pass"
            for tag, st in (("failure", "FAIL"), ("error", "error"), ("skipped", "skip")):
                el = case.find(tag)
                if el is not None:
                    status = st
                    body = (el.get("message") or "") + " " + (el.text or "")
                    break
            else:
                body = case.findtext("system-out") or ""
            yield suite.get("name"), case.get("name"), status, body


# "egress.must-fail HOST:PORT", "... via proxy", "... direct", and the
# direct DNS queries of egress.dns-bypass: "IP:53/udp", "IP:53/tcp".
DEST = re.compile(r"^(egress\.[a-z-]+) (\S+?):(\d+)(?:/(udp|tcp))?( via proxy| direct)?$")
PROTO = {"tcp": ("tcp", "6"), "udp": ("udp", "17")}


def seen(sets, ips, dst, port, proto="tcp"):
    where = set()
    for stage, elems in sets.items():
        for (src, d, pr, p) in elems:
            if src in ips and d == dst and p == port and pr in PROTO[proto]:
                where.add(stage)
    return where


# The neighbours the probe derives (its node's kubelet and runtime ports,
# the API server's service address): the node's own address is not routed,
# so the witness (forward hook) never sees them; the control proves them.
NEIGHBOUR = re.compile(r"^egress\.must-fail (node:\d+ \(.*\)|kubernetes API \S+)$")
NOT_APPLICABLE = "nothing answers it (not applicable)"


def attribute(name, status, body, sets, ips, names, proxy_ip, proxy_port):
    """(what was dialled, who stopped it or let it through)."""
    if NEIGHBOUR.match(name):
        dialled = name.split(" ", 1)[1]
        if status == "skip":
            return dialled, NOT_APPLICABLE + ": the control got nothing either"
        if status == "pass":
            return dialled, KUBE_ROUTER + " (INPUT: the node's own address; the control reached it)"
        return dialled, NOBODY + ": it answered the sandbox"
    if name.startswith("egress.dns-exfil"):
        return "a random name", RESOLVER + " (answers no name it does not serve)" if status == "pass" else NOBODY + ": the name resolved"
    m = DEST.match(name)
    if not m:
        return "?", "?"
    check, host, port, proto, how = m.group(1), m.group(2), int(m.group(3)), m.group(4) or "tcp", (m.group(5) or "").strip()
    if how == "via proxy":
        where = seen(sets, ips, proxy_ip, proxy_port)
        dialled = f"CONNECT {host}:{port} at {proxy_ip}:{proxy_port}"
        if "post" not in where:
            return dialled, f"never reached the proxy ({'/'.join(sorted(where)) or 'not seen'})"
        if check == "egress.allowed":
            return dialled, "the proxy let it through (allowed)" if status == "pass" else "the proxy refused an allowed host"
        return dialled, PROXY if status == "pass" else NOBODY + ": the proxy let it through"
    ip = host.strip("[]") if re.match(r"^[0-9.]+$", host) else names.get(host)
    if not ip:
        return f"{host}:{port}", "? (no lab address for " + host + ")"
    where = seen(sets, ips, ip, port, proto)
    dialled = f"{ip}:{port}" + ("" if proto == "tcp" else "/" + proto) + ("" if ip == host else f" ({host})")
    # The probe dials a deny that answered once more after a settle delay
    # (a new pod may run before the engine isolates it): both attempts are
    # in the witness, and the second one decided.
    if status == "pass" and "not yet in force when this pod started" in body and "mid" in where:
        return dialled, KUBE_ROUTER + " (REJECT at the node, once its sync had isolated the new pod)"
    if "post" in where:
        return dialled, NOBODY + ": it left the node for the lab" + (" and answered" if status == "FAIL" else " (refused by the target itself)")
    if "mid" in where:
        return dialled, KUBE_ROUTER + " (REJECT at the node)"
    if "pre" in where:
        return dialled, SAFETY_NET + " (dropped at the node)"
    return dialled, "never left the pod"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--junit", required=True)
    ap.add_argument("--witness", required=True)
    ap.add_argument("--lab-json", required=True)
    ap.add_argument("--probe-ip", action="append", default=[])
    ap.add_argument("--expect", choices=["healthy"])
    a = ap.parse_args()
    sets = witness_sets(a.witness)
    names, proxy_ip, proxy_port = lab_addresses(a.lab_json)
    ips = set(a.probe_ip)
    rows, bad, tally = [], [], {}
    for suite, name, status, body in verdicts(a.junit):
        if name.startswith("egress.allowed"):
            continue
        dialled, who = attribute(name, status, body, sets, ips, names, proxy_ip, proxy_port)
        rows.append((suite, name, status, dialled, who))
        key = who.split(" (")[0].split(":")[0]
        tally[key] = tally.get(key, 0) + 1
        if a.expect == "healthy" and not (status == "skip" and who.startswith(NOT_APPLICABLE)):
            direct = " via proxy" not in name and not name.startswith("egress.dns-exfil")
            want = KUBE_ROUTER if direct else (PROXY if " via proxy" in name else RESOLVER)
            if status != "pass" or not who.startswith(want):
                bad.append(f"{name}: {status}, {who} (want pass by {want})")
    wn = max([len(r[1]) for r in rows] + [10])
    wd = max([len(r[3]) for r in rows] + [10])
    for suite, name, status, dialled, who in rows:
        print(f"{name:<{wn}}  {status:<5} {dialled:<{wd}}  {who}")
    print("enforced by: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items(), key=lambda kv: -kv[1])))
    if bad:
        print("not enforced as the e2e cluster promises:", file=sys.stderr)
        for b in bad:
            print("  " + b, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
