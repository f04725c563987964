#!/usr/bin/env python3
"""Deployment test (docs/deploy.md): Debian's Prometheus scrapes a running Glimpse cluster.

1. deploy/k8s: every manifest parses (python3-yaml), kustomization.yaml lists exactly the
   manifests in the folder, and the ConfigMap holds one YAML config per service.
2. deploy/prometheus: `promtool check config` on local.yml and prometheus.yml. Debian builds
   Prometheus without Kubernetes service discovery, so when promtool rejects prometheus.yml for
   exactly that reason, a copy with `kubernetes_sd_configs` swapped for an empty static list is
   checked instead (relabelling and everything else) and the substitution is printed.
3. The five service binaries start with the ConfigMap's configs (flags override addresses and
   paths: loopback, free ports, a temporary directory), so a key or value the binaries reject
   fails here; the coordinator's state goes to an etcd member over mutual TLS, as in
   deploy/k8s/etcd.yaml (whose members the coordinator's and the nodes' configs must name), and
   the workers find the cache node there (membership.*, no list of cache nodes) and announce
   themselves there to the coordinator. One chat turn runs through the frontend (`glimpse chat`).
4. Every `glimpse_` metric family the five services export after the turn is listed in
   docs/metrics.md with its type and help text; `--write-metrics-doc` (target glimpse_metrics_doc)
   regenerates that file. A family in the file that no service exported is kept: some are made
   on their first event.
5. `prometheus` runs with deploy/prometheus/local.yml, its targets replaced by the cluster's
   metrics ports and a 1 s interval; the test polls /api/v1/query until up == 1 for the four jobs
   and a Glimpse metric of each service has its value.

A missing prometheus or promtool fails the test: run tools/setup/install_deps.sh (`make test` does).
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

try:
    import yaml
except ImportError:
    sys.exit("FAIL: python3-yaml is missing; run tools/setup/install_deps.sh (make test does)")

SERVICES = ["coordinator", "cache-node", "decode-worker", "prefill-worker", "frontend"]

# (PromQL, what it shows). Each must return at least one sample with a value > 0.
QUERIES = [
    ('up{job="glimpse-coordinator"} == 1', "the coordinator is scraped"),
    ('up{job="glimpse-cache-node"} == 1', "the cache node is scraped"),
    ('up{job="glimpse-decode-worker"} == 1', "the decode worker is scraped"),
    ('up{job="glimpse-prefill-worker"} == 1', "the prefill worker is scraped"),
    ('up{job="glimpse-frontend"} == 1', "the frontend is scraped"),
    ('glimpse_coordinator_nodes{job="glimpse-coordinator",state="alive"}',
     "the coordinator counts live nodes"),
    ('sum(glimpse_coordinator_routes_total{job="glimpse-coordinator"})',
     "the coordinator routed the turn"),
    ('sum(glimpse_cache_node_puts_total{job="glimpse-cache-node"})',
     "the cache node stored the turn's state"),
    ('glimpse_decode_worker_generated_tokens_total{job="glimpse-decode-worker"}',
     "the decode worker generated tokens"),
    ('glimpse_decode_worker_kv_pool_bytes{job="glimpse-decode-worker",state="held"} > 0',
     "the decode worker's KV pool holds the session's pages"),
    ('sum(glimpse_frontend_turns_total{job="glimpse-frontend"})', "the frontend served a turn"),
]


class Failure(Exception):
    pass


def fail(message):
    raise Failure(message)


def log(message):
    print(f"[prometheus_test] {message}", flush=True)


# ---- 1. manifests -------------------------------------------------------------------------------


def check_manifests(source):
    k8s = source / "deploy" / "k8s"
    kustomization = yaml.safe_load((k8s / "kustomization.yaml").read_text())
    listed = sorted(kustomization.get("resources", []))
    present = sorted(p.name for p in k8s.glob("*.yaml") if p.name != "kustomization.yaml")
    if listed != present:
        fail(f"deploy/k8s/kustomization.yaml lists {listed}, the folder has {present}")
    kinds = {}
    configs = None
    for name in present:
        for doc in yaml.safe_load_all((k8s / name).read_text()):
            if doc is None:
                continue
            for field in ("apiVersion", "kind", "metadata"):
                if field not in doc:
                    fail(f"deploy/k8s/{name}: a document without {field}")
            if "namespace" in doc["metadata"]:
                fail(f"deploy/k8s/{name}: {doc['metadata']['name']} sets a namespace")
            kinds.setdefault(doc["kind"], []).append(doc["metadata"]["name"])
            if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "glimpse-config":
                configs = doc["data"]
    for kind in ("ConfigMap", "Deployment", "StatefulSet", "Service", "NetworkPolicy"):
        if kind not in kinds:
            fail(f"deploy/k8s has no {kind} (kinds: {kinds})")
    if configs is None:
        fail("deploy/k8s has no ConfigMap glimpse-config")
    parsed = {}
    for service in SERVICES:
        key = f"{service}.yaml"
        if key not in configs:
            fail(f"ConfigMap glimpse-config has no {key} (keys: {sorted(configs)})")
        parsed[service] = yaml.safe_load(configs[key])
        for address in ("listen", "metrics_listen"):
            if not str(parsed[service].get(address, "")).startswith("0.0.0.0:"):
                fail(f"{key}: {address} must bind 0.0.0.0 inside a pod, got "
                     f"{parsed[service].get(address)!r}")
        # Internal services beyond loopback serve mutual TLS (the binaries refuse otherwise); every
        # caller of them presents its certificate.
        if service != "frontend" and not parsed[service].get("tls", {}).get("client_ca"):
            fail(f"{key}: an internal service needs tls.cert, tls.key and tls.client_ca")
        if service != "coordinator" and not parsed[service].get("client_tls", {}).get("cert"):
            fail(f"{key}: needs client_tls (a certificate for the internal services it calls)")
    check_etcd_members(k8s, parsed)
    log(f"deploy/k8s: {sum(len(v) for v in kinds.values())} objects parse: "
        + ", ".join(f"{k} {sorted(v)}" for k, v in sorted(kinds.items())))
    return configs


def check_etcd_members(k8s, parsed):
    """The coordinators' etcd endpoints, and the nodes' (membership), are exactly the etcd
    StatefulSet's members, which the members' --initial-cluster lists too."""
    etcd = next(d for d in yaml.safe_load_all((k8s / "etcd.yaml").read_text())
                if d and d["kind"] == "StatefulSet")
    name, replicas = etcd["metadata"]["name"], etcd["spec"]["replicas"]
    service = etcd["spec"]["serviceName"]
    members = [f"{name}-{i}.{service}" for i in range(replicas)]
    for service, section in [("coordinator", "store"), ("cache-node", "membership"),
                             ("decode-worker", "membership"), ("prefill-worker", "membership")]:
        endpoints = parsed[service].get(section, {}).get("etcd_endpoints", [])
        if endpoints != [f"{m}:2379" for m in members]:
            fail(f"{service}.yaml: {section}.etcd_endpoints {endpoints} are not the members "
                 f"{members}")
    args = etcd["spec"]["template"]["spec"]["containers"][0]["args"]
    initial = next(a for a in args if a.startswith("--initial-cluster="))
    expected = ",".join(f"{name}-{i}=https://{m}:2380" for i, m in enumerate(members))
    if initial != f"--initial-cluster={expected}":
        fail(f"etcd.yaml: {initial} is not the {replicas} members ({expected})")


# ---- 2. promtool --------------------------------------------------------------------------------


def promtool_check(promtool, path):
    r = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def check_prometheus_configs(source, promtool, tmp):
    local = source / "deploy" / "prometheus" / "local.yml"
    rc, out = promtool_check(promtool, local)
    if rc != 0:
        fail(f"promtool check config {local} failed:\n{out}")
    k8s = source / "deploy" / "prometheus" / "prometheus.yml"
    rc, out = promtool_check(promtool, k8s)
    if rc == 0:
        log(f"promtool: {k8s.name} and {local.name} are valid")
        return
    if "field kubernetes_sd_configs not found" not in out:
        fail(f"promtool check config {k8s} failed:\n{out}")
    config = yaml.safe_load(k8s.read_text())
    for job in config["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": []}]
    copy = tmp / "prometheus-k8s-without-sd.yml"
    copy.write_text(yaml.safe_dump(config))
    rc, out = promtool_check(promtool, copy)
    if rc != 0:
        fail(f"promtool check config on {k8s} (kubernetes_sd_configs made static) failed:\n{out}")
    log(f"promtool: {local.name} valid; this Prometheus build has no kubernetes_sd, so "
        f"{k8s.name} was checked with it replaced by an empty static list: valid")


# ---- 3. the cluster -----------------------------------------------------------------------------


def stop_process(proc, log_file):
    """SIGTERM, 15 s to exit, then SIGKILL; closes the process's log."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log_file.close()


class Service:
    def __init__(self, name, binary, config_text, flags, tmp):
        self.name = name
        self.config = tmp / f"{name}.yaml"
        self.config.write_text(config_text)
        self.log_path = tmp / "logs" / f"{name}.log"
        args = [str(binary), f"--config={self.config}", "--listen=127.0.0.1:0",
                "--metrics_listen=127.0.0.1:0"] + flags
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.grpc_port = None
        self.metrics_port = None

    def wait_serving(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if '"msg":"serving"' in line:
                    record = json.loads(line)
                    self.grpc_port = int(record["grpc_port"])
                    self.metrics_port = int(record["metrics_port"])
                    log(f"{self.name}: grpc 127.0.0.1:{self.grpc_port}, "
                        f"metrics http://127.0.0.1:{self.metrics_port}/metrics")
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        fail(f"{self.name} did not log \"serving\" within {timeout} s "
             f"(exit {self.proc.poll()}); log:\n{tail(self.log_path)}")

    @property
    def address(self):
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self):
        stop_process(self.proc, self.log_file)


def tail(path, limit=4000):
    try:
        return pathlib.Path(path).read_text(errors="replace")[-limit:]
    except OSError as e:
        return f"(cannot read {path}: {e})"


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_for(what, predicate, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except (OSError, urllib.error.URLError, ValueError) as e:
            last = e
        time.sleep(interval)
    suffix = f" (last error: {last})" if last else ""
    fail(f"timed out after {timeout} s waiting for {what}{suffix}")


def metric_value(text, name, labels):
    pattern = re.compile(r"^" + re.escape(name) + r"\{([^}]*)\}\s+(\S+)$|^" + re.escape(name) +
                         r"\s+(\S+)$")
    for line in text.splitlines():
        m = pattern.match(line)
        if not m:
            continue
        if m.group(3) is not None:
            if not labels:
                return float(m.group(3))
            continue
        if all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            return float(m.group(2))
    return None


# Each service's certificate (`glimpse certs` names them by role), in place of the Secret the
# manifests mount at /etc/glimpse-tls.
ROLES = {"coordinator": "coordinator", "cache-node": "cache", "decode-worker": "decode",
         "prefill-worker": "prefill", "frontend": "frontend"}


def make_certificates(args, tmp):
    tls = tmp / "tls"
    r = subprocess.run([str(args.glimpse), "certs", "--dir", str(tls), "--dns", "glimpse.internal"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"glimpse certs failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
    return tls


def tls_flags(config_text, role, tls):
    config = yaml.safe_load(config_text)
    files = {"cert": tls / f"{role}.pem", "key": tls / f"{role}.key"}
    flags = []
    if "tls" in config:
        flags += [f"--tls.cert={files['cert']}", f"--tls.key={files['key']}",
                  f"--tls.client_ca={tls / 'ca.pem'}"]
    if "client_tls" in config:
        flags += [f"--client_tls.cert={files['cert']}", f"--client_tls.key={files['key']}",
                  f"--client_tls.ca={tls / 'ca.pem'}"]
    return flags


class Etcd:
    """One etcd member (Debian's etcd-server) over mutual TLS with a CA of its own, as
    deploy/k8s/etcd.yaml runs three; its certificates and the coordinator's are in `tls`."""

    def __init__(self, tmp, tls):
        self.port = free_port()
        peer = free_port()
        self.log_path = tmp / "logs" / "etcd.log"
        self.log_file = open(self.log_path, "ab")
        client, peer_url = f"https://127.0.0.1:{self.port}", f"http://127.0.0.1:{peer}"
        self.proc = subprocess.Popen(
            ["etcd", "--name=etcd-0", f"--data-dir={tmp / 'etcd'}", "--logger=zap",
             f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
             f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
             f"--initial-cluster=etcd-0={peer_url}", f"--cert-file={tls / 'etcd.pem'}",
             f"--key-file={tls / 'etcd.key'}", f"--trusted-ca-file={tls / 'ca.pem'}",
             "--client-cert-auth"],
            stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for("etcd to serve clients",
                 lambda: "serving client traffic" in self.log_path.read_text(errors="replace"),
                 60)

    def stop(self):
        stop_process(self.proc, self.log_file)


def start_etcd(args, tmp):
    tls = tmp / "etcd-tls"
    r = subprocess.run([str(args.glimpse), "certs", "--dir", str(tls), "--members",
                        "etcd/*,coordinator/*,node/*"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"glimpse certs (etcd) failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
    etcd = Etcd(tmp, tls)
    flags = [f"--store.etcd_endpoints=127.0.0.1:{etcd.port}",
             f"--store.etcd_ca={tls / 'ca.pem'}", f"--store.etcd_cert={tls / 'coordinator.pem'}",
             f"--store.etcd_key={tls / 'coordinator.key'}", "--advertise_host=127.0.0.1"]
    # The cache node and the workers: the live cache nodes, with the nodes' certificate.
    node_flags = [f"--membership.etcd_endpoints=127.0.0.1:{etcd.port}",
                  f"--membership.etcd_ca={tls / 'ca.pem'}",
                  f"--membership.etcd_cert={tls / 'node.pem'}",
                  f"--membership.etcd_key={tls / 'node.key'}"]
    return etcd, flags, node_flags


def start_cluster(args, configs, tmp, services, helpers):
    tls = make_certificates(args, tmp)

    def start(name, flags):
        flags = flags + tls_flags(configs[f"{name}.yaml"], ROLES[name], tls)
        service = Service(name, args.bin[name], configs[f"{name}.yaml"], flags, tmp)
        services.append(service)
        service.wait_serving(90)
        return service

    etcd, etcd_flags, node_flags = start_etcd(args, tmp)
    helpers.append(etcd)
    coordinator = start("coordinator", etcd_flags)
    # Serving is not leading: it leads once it won the election on the fresh etcd.
    wait_for("the coordinator to lead",
             lambda: metric_value(http_get(f"http://127.0.0.1:{coordinator.metrics_port}/metrics"),
                                  "glimpse_coordinator_leader", {}) == 1, 60)
    start("cache-node", [f"--storage.path={tmp / 'cache-node'}",
                         "--storage.sync_every_put=false", "--warm.bytes=64MiB",
                         "--storage.block_cache=16MiB", "--storage.write_buffer=8MiB",
                         "--transport.receive_pool=64MiB", f"--coordinator={coordinator.address}",
                         "--advertise_host=127.0.0.1"] + node_flags)
    # The image has models/lookahead/ where the ConfigMap's lookahead_module points.
    decode = yaml.safe_load(configs["decode-worker.yaml"])
    module = pathlib.PurePosixPath(decode["lookahead_module"])
    lookahead = args.source / "models" / "lookahead" / module.name
    image_dir = pathlib.PurePosixPath("/opt/glimpse/models/lookahead")
    if module.parent != image_dir or not lookahead.exists():
        fail(f"decode-worker.yaml: lookahead_module {module} is not a file of models/lookahead/ "
             "as deploy/Dockerfile installs it (/opt/glimpse/models/lookahead/)")
    start("decode-worker", [f"--coordinator={coordinator.address}", "--advertise_host=127.0.0.1",
                            "--threads=2", "--kv_memory=256MiB", f"--lookahead_module={lookahead}"]
          + node_flags)
    start("prefill-worker", [f"--coordinator={coordinator.address}", "--advertise_host=127.0.0.1",
                             "--threads=2", f"--lookahead_module={lookahead}"] + node_flags)
    frontend = start("frontend", [f"--coordinator={coordinator.address}",
                                  "--openai.listen=127.0.0.1:0"])
    # The workers have no cache node list: each finds the cache node on etcd once it announced.
    for worker in [s for s in services if s.name.endswith("-worker")]:
        wait_for(f"the {worker.name} to list the cache node",
                 lambda w=worker: (metric_value(
                     http_get(f"http://127.0.0.1:{w.metrics_port}/metrics"),
                     f"glimpse_{w.name.replace('-', '_')}_cache_nodes", {}) or 0) >= 1, 60)
    # And each announces itself there; the leading coordinator watches them (a worker whose
    # announcement ends is dead at once).
    wait_for("the coordinator to see both workers announced on etcd",
             lambda: metric_value(http_get(f"http://127.0.0.1:{coordinator.metrics_port}/metrics"),
                                  "glimpse_coordinator_workers_announced", {}) == 2, 60)

    metrics_url = f"http://127.0.0.1:{coordinator.metrics_port}/metrics"
    wait_for("the workers to register with the coordinator",
             lambda: (metric_value(http_get(metrics_url), "glimpse_coordinator_nodes",
                                   {"state": "alive"}) or 0) >= 2, 60)
    return frontend


def run_chat_turn(args, frontend):
    cmd = [str(args.glimpse), "chat", "--frontend", frontend.address, "--max-tokens", "8",
           "--session", "prometheus-test"]
    r = subprocess.run(cmd, input="Name one prime number.\n", capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        fail(f"`{' '.join(cmd)}` failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
    log("chat turn: " + " ".join((r.stdout + r.stderr).split())[:300])


# ---- 4. docs/metrics.md -------------------------------------------------------------------------

METRICS_DOC = "docs/metrics.md"
METRICS_DOC_HEADER = """# Metrics

Every Prometheus metric family the services export on `/metrics` (`metrics_listen`), with its type
and help text. Generated from the running services (`cmake --build build --target
glimpse_metrics_doc`, which runs `tests/prometheus_test.py --write-metrics-doc`); the deployment
test `glimpse_prometheus_test` fails when a service exports a family this file does not list, or
lists with another type or text. Configuration keys: [configuration.md](configuration.md).
"""


def metric_families(exposition):
    """{name: (type, help)} of the glimpse_ families a /metrics text declares."""
    helps, types = {}, {}
    for line in exposition.splitlines():
        m = re.match(r"# (HELP|TYPE) (glimpse_\w+) ?(.*)$", line)
        if m:
            (helps if m.group(1) == "HELP" else types)[m.group(2)] = m.group(3)
    return {n: (types.get(n, "untyped"), helps.get(n, "")) for n in helps.keys() | types.keys()}


def parse_metrics_doc(text):
    """{service: {name: (type, help)}} from docs/metrics.md."""
    out, service = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            service = line[3:].strip()
            out[service] = {}
        m = re.match(r"\| `(glimpse_\w+)` \| (\w+) \| (.*) \|$", line)
        if m and service is not None:
            out[service][m.group(1)] = (m.group(2), m.group(3).replace("\\|", "|"))
    return out


def render_metrics_doc(families):
    lines = [METRICS_DOC_HEADER]
    for service in SERVICES:
        lines += [f"## glimpse-{service}", "", "| metric | type | what |", "|---|---|---|"]
        for name, (kind, text) in sorted(families.get(f"glimpse-{service}", {}).items()):
            lines.append(f"| `{name}` | {kind} | {text.replace('|', chr(92) + '|')} |")
        lines.append("")
    return "\n".join(lines)


def check_metrics_doc(args, services):
    path = args.source / METRICS_DOC
    documented = parse_metrics_doc(path.read_text()) if path.exists() else {}
    exported = {f"glimpse-{s.name}": metric_families(
        http_get(f"http://127.0.0.1:{s.metrics_port}/metrics")) for s in services}
    if args.write_metrics_doc:
        merged = {svc: {**documented.get(svc, {}), **fams} for svc, fams in exported.items()}
        path.write_text(render_metrics_doc(merged))
        log(f"wrote {path} ({sum(len(f) for f in merged.values())} families)")
        return
    wrong = [f"{svc} {name}: exported {got}, documented {documented.get(svc, {}).get(name)}"
             for svc, fams in exported.items() for name, got in sorted(fams.items())
             if documented.get(svc, {}).get(name) != got]
    if wrong:
        fail(f"{METRICS_DOC} is out of date; regenerate it with `cmake --build build --target "
             f"glimpse_metrics_doc`:\n  " + "\n  ".join(wrong))
    log(f"{METRICS_DOC}: all {sum(len(f) for f in exported.values())} exported families listed")


# ---- 5. Prometheus ------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_prometheus(args, services, tmp):
    config = yaml.safe_load((args.source / "deploy" / "prometheus" / "local.yml").read_text())
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    ports = {f"glimpse-{s.name}": s.metrics_port for s in services}
    for job in config["scrape_configs"]:
        if job["job_name"] not in ports:
            fail(f"deploy/prometheus/local.yml: unknown job {job['job_name']}")
        job["static_configs"] = [{"targets": [f"127.0.0.1:{ports.pop(job['job_name'])}"]}]
    if ports:
        fail(f"deploy/prometheus/local.yml has no job for {sorted(ports)}")
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = tmp / "logs" / "prometheus.log"
    log_file = open(log_path, "ab")
    proc = subprocess.Popen(
        [args.prometheus, f"--config.file={path}", f"--storage.tsdb.path={tmp / 'prometheus'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("Prometheus to be ready",
                 lambda: proc.poll() is None and http_get(f"{url}/-/ready").strip() != "", 60)
    except Failure as e:
        fail(f"{e}; prometheus exit {proc.poll()}, log:\n{tail(log_path)}")
    log(f"prometheus {url} scraping every 1 s (config {path})")
    return proc, log_file, url


def query(url, promql):
    body = json.loads(http_get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    if body.get("status") != "success":
        raise ValueError(f"query {promql!r}: {body}")
    return [float(r["value"][1]) for r in body["data"]["result"]]


def check_queries(url, timeout):
    deadline = time.monotonic() + timeout
    pending = list(QUERIES)
    results = {}
    while pending and time.monotonic() < deadline:
        for promql, what in list(pending):
            values = query(url, promql)
            if values and all(v > 0 for v in values):
                results[promql] = values
                pending.remove((promql, what))
                log(f"ok: {promql} = {values} ({what})")
        time.sleep(0.5)
    if pending:
        targets = http_get(f"{url}/api/v1/targets")
        fail("Prometheus never answered " + "; ".join(f"{q} ({w})" for q, w in pending) +
             f"\ntargets: {targets[:3000]}")


# ---- main ---------------------------------------------------------------------------------------


def find_tool(name, given):
    path = given or shutil.which(name)
    if not path or not os.access(path, os.X_OK):
        fail(f"`{name}` not found: the deployment test needs Debian's prometheus package; run "
             "tools/setup/install_deps.sh (make test does)")
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", type=pathlib.Path, required=True, help="repository root")
    p.add_argument("--glimpse", type=pathlib.Path, required=True, help="the glimpse CLI")
    for service in SERVICES:
        p.add_argument(f"--{service}", type=pathlib.Path, required=True,
                       help=f"the glimpse-{service} binary")
    p.add_argument("--prometheus", default="", help="prometheus binary (default: on PATH)")
    p.add_argument("--promtool", default="", help="promtool binary (default: on PATH)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--write-metrics-doc", action="store_true",
                   help=f"regenerate {METRICS_DOC} from the services instead of checking it")
    args = p.parse_args()
    args.bin = {s: getattr(args, s.replace("-", "_")) for s in SERVICES}

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="glimpse-prometheus-test-"))
    (tmp / "logs").mkdir()
    services = []
    helpers = []  # etcd
    prometheus = None
    ok = False
    try:
        args.prometheus = find_tool("prometheus", args.prometheus)
        args.promtool = find_tool("promtool", args.promtool)
        configs = check_manifests(args.source)
        check_prometheus_configs(args.source, args.promtool, tmp)
        frontend = start_cluster(args, configs, tmp, services, helpers)
        run_chat_turn(args, frontend)
        check_metrics_doc(args, services)
        if args.write_metrics_doc:
            ok = True
            return 0
        prometheus = start_prometheus(args, services, tmp)
        check_queries(prometheus[2], 60)
        ok = True
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        for s in services + helpers:
            print(f"--- {s.log_path} ---\n{tail(s.log_path, 1500)}", file=sys.stderr)
    finally:
        if prometheus is not None:
            proc, log_file, _ = prometheus
            stop_process(proc, log_file)
        for s in reversed(services + helpers):
            s.stop()
        if ok and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"[prometheus_test] files kept in {tmp}", file=sys.stderr)
    if ok:
        log("PASS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
