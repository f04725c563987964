#!/usr/bin/env python3
"""Glimpse across "hosts": the four services in separate Linux network namespaces, joined by veth
pairs to a bridge, talking gRPC and UCX over TCP on 10.77.0.0/24; then a link is cut.

    python3 tests/netns_test.py --source . --glimpse build/tools/cli/glimpse \
        --coordinator ... --cache-node ... --decode-worker ... --frontend ...

Topology (all names carry this run's pid, so concurrent runs do not collide; the root namespace
gets no device, address or route):

    ns "sw"  bridge br0, ports pa pb pc pd (no address)
    ns "a"   eth0 10.77.0.2  glimpse-coordinator :7400, glimpse-frontend :7500, and this test's
                             client (the script re-executes itself there with --inner)
    ns "b"   eth0 10.77.0.3  glimpse-cache-node :7600
    ns "c"   eth0 10.77.0.4  glimpse-decode-worker d1 :7700 (advertise_host 10.77.0.4)
    ns "d"   eth0 10.77.0.5  glimpse-decode-worker d2 :7700 (advertise_host 10.77.0.5)

Every service listens (gRPC and /metrics) on its own namespace's address; UCX_TLS=tcp,self and
UCX_NET_DEVICES=eth0 (shared memory does not cross hosts). Checked:
  1. turn 1 of a session is recomputed on one decode worker (X); the state is acknowledged;
  2. X's link is cut (its switch port down): the coordinator drops X after missed heartbeats, and
     the next turn either fails with UNAVAILABLE naming "decode worker X" (routed before X was
     declared dead) and then, or at once, continues on the other worker Y from the warm tier
     (source warm, reused tokens > 0): the acknowledged state was not lost;
  3. the link comes back: X registers again (two live decode workers);
  4. the cache node's link flaps (down FLAP_S = 3 s) while a turn that needs it runs (a new session
     replaying the conversation): the turn ends within 45 s, answered (any source) or failed with
     UNAVAILABLE/DEADLINE_EXCEEDED;
  5. with the link back, the replay (a fresh session, up to 3 tries: a channel broken by the flap
     may miss once and recompute) is warm with the same reuse as turn 2.

Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) where `ip netns add`, veth and bridge work: probed by
doing it in a throwaway namespace; otherwise exit 77 (ctest SKIP_RETURN_CODE, tests/netns.cmake)
with the reason. GLIMPSE_NETNS_FORCE_SKIP=1 forces the skip path. Everything is removed at the end
(processes by pid, then the namespaces, which takes their veths and the bridge with them).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

SKIP = 77
HOSTS = {"a": "10.77.0.2", "b": "10.77.0.3", "c": "10.77.0.4", "d": "10.77.0.5"}
PORTS = {"coordinator": 7400, "frontend": 7500, "cache": 7600, "decode": 7700}
TOTAL_BUDGET_S = 150.0
FLAP_S = 3.0  # how long the cache node's link is down  # ctest's TIMEOUT is 180


def log(msg: str) -> None:
    print(f"[netns {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(*args: str, check: bool = True, timeout: float = 10.0) -> subprocess.CompletedProcess:
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


# --------------------------------------------------------------------------------------------
# Outer process (root namespace): probe, topology, teardown.

def probe() -> Optional[str]:
    """None if namespaces, veth and a bridge can be made here; else why not."""
    if os.environ.get("GLIMPSE_NETNS_FORCE_SKIP"):
        return "GLIMPSE_NETNS_FORCE_SKIP is set"
    if shutil.which("ip") is None:
        return "no `ip` command (apt-get install iproute2)"
    ns = f"glprobe{os.getpid()}"
    try:
        p = sh("ip", "netns", "add", ns, check=False)
        if p.returncode != 0:
            return (f"`ip netns add` failed (needs root or CAP_NET_ADMIN+CAP_SYS_ADMIN; "
                    f"uid {os.geteuid()}): {p.stderr.strip()}")
        for cmd in (["ip", "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                    ["ip", "-n", ns, "link", "add", "br0", "type", "bridge"],
                    ["ip", "-n", ns, "link", "set", "v1", "master", "br0"],
                    ["ip", "-n", ns, "addr", "add", "10.77.0.9/24", "dev", "v0"],
                    ["ip", "-n", ns, "link", "set", "v0", "up"]):
            p = sh(*cmd, check=False)
            if p.returncode != 0:
                return f"`{' '.join(cmd)}` failed: {p.stderr.strip()}"
        p = sh("ip", "netns", "exec", ns, "true", check=False)
        if p.returncode != 0:
            return f"`ip netns exec` failed: {p.stderr.strip()}"
        return None
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"probe failed: {e}"
    finally:
        sh("ip", "netns", "del", ns, check=False)


class Topology:
    def __init__(self) -> None:
        tag = f"gl{os.getpid()}"
        self.ns = {h: f"{tag}-{h}" for h in ["sw", *HOSTS]}
        self.made: List[str] = []

    def up(self) -> None:
        sw = self.ns["sw"]
        for name in self.ns.values():
            sh("ip", "netns", "add", name)
            self.made.append(name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        for host, addr in HOSTS.items():
            ns, port = self.ns[host], f"p{host}"
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
               "netns", sw)
            sh("ip", "-n", sw, "link", "set", port, "master", "br0")
            sh("ip", "-n", sw, "link", "set", port, "up")
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        # Reachability: a -> each host (bridge learning, no STP delay on a fresh bridge).
        for host, addr in HOSTS.items():
            if host == "a" or shutil.which("ping") is None:
                continue
            ok = False
            for _ in range(20):
                if sh("ip", "netns", "exec", self.ns["a"], "ping", "-c1", "-W1", addr,
                      check=False).returncode == 0:
                    ok = True
                    break
                time.sleep(0.25)
            if not ok:
                raise RuntimeError(f"10.77.0.2 cannot ping {addr} across the bridge")

    def down(self) -> None:
        # Our processes first (ip netns pids: every pid in a namespace we made), then namespaces.
        for name in self.made:
            pids = sh("ip", "netns", "pids", name, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for name in reversed(self.made):
            sh("ip", "netns", "del", name, check=False)
        self.made = []


def outer(args: argparse.Namespace, argv: List[str]) -> int:
    why = probe()
    if why is not None:
        print(f"SKIP: network namespaces unavailable: {why}", flush=True)
        return SKIP
    topo = Topology()

    def terminate(signum, _frame):  # ctest, Ctrl-C: still tear the topology down
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    work = tempfile.mkdtemp(prefix="glimpse-netns-")
    os.chmod(work, 0o755)
    rc = 1
    try:
        topo.up()
        log("topology: " + ", ".join(f"{h}={topo.ns[h]}({HOSTS[h]})" for h in HOSTS)
            + f", switch {topo.ns['sw']}")
        inner_cmd = ["ip", "netns", "exec", topo.ns["a"], sys.executable, os.path.abspath(__file__),
                     "--inner", "--work", work, *[f"--ns-{h}={n}" for h, n in topo.ns.items()],
                     *argv]
        try:
            rc = subprocess.run(inner_cmd, timeout=TOTAL_BUDGET_S).returncode
        except subprocess.TimeoutExpired:
            log(f"inner test ran past {TOTAL_BUDGET_S} s")
            rc = 1
    finally:
        topo.down()
        left = [n for n in sh("ip", "netns", "list", check=False).stdout.split()
                if n.startswith(f"gl{os.getpid()}-")]
        if left:
            log(f"namespaces left behind: {left}")
            rc = rc or 1
        shutil.rmtree(work, ignore_errors=True)
    log("PASS" if rc == 0 else f"FAIL (exit {rc})")
    return rc


# --------------------------------------------------------------------------------------------
# Inner process (namespace a): services, client, checks.

class Service:
    def __init__(self, name: str, ns: str, binary: str, args: List[str], work: Path,
                 env: Dict[str, str]) -> None:
        self.name, self.log_path = name, work / f"{name}.log"
        self.out = open(self.log_path, "w")
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, binary, *args,
                                      "--shutdown_grace=500ms"],
                                     stdout=self.out, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def await_serving(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if '"msg":"serving"' in self.log_path.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode} before serving")
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not log \"serving\" in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            # ip netns exec execs the binary, so the pid is the service's own.
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.out.close()

    def tail(self, n: int = 2500) -> str:
        return self.log_path.read_text(errors="replace")[-n:]


class Failure(Exception):
    pass


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)
    log(f"ok: {what}")


def inner(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(Path(args.source) / "clients" / "python"))
    import build_protos  # noqa: E402
    build_protos.main(["--quiet"])
    import grpc  # noqa: E402
    from glimpse_client import GlimpseClient, GlimpseError  # noqa: E402
    from glimpse.v1 import coordinator_pb2, coordinator_pb2_grpc  # noqa: E402

    ns = {h: getattr(args, f"ns_{h}") for h in ["sw", *HOSTS]}
    work = Path(args.work)
    start = time.monotonic()
    env = dict(os.environ, UCX_TLS="tcp,self", UCX_NET_DEVICES="eth0")
    addr = {
        "coordinator": f"{HOSTS['a']}:{PORTS['coordinator']}",
        "frontend": f"{HOSTS['a']}:{PORTS['frontend']}",
        "cache": f"{HOSTS['b']}:{PORTS['cache']}",
    }
    services: List[Service] = []

    # Beyond loopback the internal services serve mutual TLS: a certificate per process from one
    # CA (`glimpse certs`), and callers check the name every certificate shares.
    tls = work / "tls"
    subprocess.run([args.glimpse, "certs", "--dir", str(tls), "--dns", "glimpse.internal",
                    "--members", "coordinator/*,cache/cache-0,decode/d1,decode/d2,frontend/*,"
                    "admin/netns-test"], check=True, capture_output=True, timeout=60)
    cert_of = {"coordinator": "coordinator", "cache": "cache-cache-0", "decode-d1": "decode-d1",
               "decode-d2": "decode-d2", "frontend": "frontend"}

    def tls_flags(name: str) -> List[str]:
        cert, key, ca = (tls / f"{cert_of[name]}.pem", tls / f"{cert_of[name]}.key",
                         tls / "ca.pem")
        flags = []
        if name != "frontend":  # its client API stays plaintext
            flags += [f"--tls.cert={cert}", f"--tls.key={key}", f"--tls.client_ca={ca}"]
        if name != "coordinator":
            flags += [f"--client_tls.cert={cert}", f"--client_tls.key={key}",
                      f"--client_tls.ca={ca}", "--client_tls.server_name=glimpse.internal"]
        return flags

    def start_service(name: str, host: str, binary: str, extra: List[str]) -> Service:
        s = Service(name, ns[host], binary,
                    [f"--metrics_listen={HOSTS[host]}:9{PORTS[name.split('-')[0]] % 1000:03d}",
                     *tls_flags(name), *extra], work, env)
        services.append(s)
        return s

    def link(host: str, state: str) -> None:
        sh("ip", "-n", ns["sw"], "link", "set", f"p{host}", state)
        log(f"link of host {host} ({HOSTS[host]}) {state}")

    try:
        coord = start_service("coordinator", "a", args.coordinator, [
            f"--listen={addr['coordinator']}", f"--store.path={work / 'coordinator'}",
            "--membership.heartbeat_interval=300ms", "--lease.fixed_ttl=10m"])
        cache = start_service("cache", "b", args.cache_node, [
            f"--listen={addr['cache']}", f"--storage.path={work / 'cache'}",
            f"--coordinator={addr['coordinator']}", f"--advertise_host={HOSTS['b']}",
            "--node_id=cache-0"])
        coord.await_serving(time.monotonic() + 30)
        cache.await_serving(time.monotonic() + 30)
        workers = {}
        for wid, host in (("d1", "c"), ("d2", "d")):
            workers[wid] = start_service(f"decode-{wid}", host, args.decode_worker, [
                f"--listen={HOSTS[host]}:{PORTS['decode']}", f"--advertise_host={HOSTS[host]}",
                f"--coordinator={addr['coordinator']}", f"--cache_node={addr['cache']}",
                f"--node_id={wid}", "--threads=1"])
        frontend = start_service("frontend", "a", args.frontend, [
            f"--listen={addr['frontend']}", f"--coordinator={addr['coordinator']}",
            "--policy.method=snapkv", "--policy.budget_ratio=0.5", "--policy.codec=int8"])
        for s in (*workers.values(), frontend):
            s.await_serving(time.monotonic() + 60)
        host_of = {"d1": "c", "d2": "d"}

        channel = grpc.secure_channel(
            addr["coordinator"],
            grpc.ssl_channel_credentials((tls / "ca.pem").read_bytes(),
                                         (tls / "admin-netns-test.key").read_bytes(),
                                         (tls / "admin-netns-test.pem").read_bytes()),
            options=[("grpc.ssl_target_name_override", "glimpse.internal")])
        coordinator = coordinator_pb2_grpc.CoordinatorStub(channel)

        def live_decode() -> Dict[str, str]:
            try:
                resp = coordinator.ListNodes(
                    coordinator_pb2.ListNodesRequest(role=coordinator_pb2.NODE_ROLE_DECODE),
                    timeout=2)
            except grpc.RpcError:
                return {}
            return {n.node_id: n.grpc_address for n in resp.nodes}

        def await_decode(ids: set, within: float) -> Dict[str, str]:
            deadline = time.monotonic() + within
            nodes = live_decode()
            while set(nodes) != ids and time.monotonic() < deadline:
                time.sleep(0.1)
                nodes = live_decode()
            expect(set(nodes) == ids, f"coordinator lists decode workers {sorted(ids)} "
                                      f"(has {nodes})")
            return nodes

        nodes = await_decode({"d1", "d2"}, 20)
        expect(nodes == {"d1": f"{HOSTS['c']}:{PORTS['decode']}",
                         "d2": f"{HOSTS['d']}:{PORTS['decode']}"},
               "decode workers registered with their namespace addresses")
        log(f"cluster up in {time.monotonic() - start:.1f} s")

        q1, q2 = "What is the capital of France?", "Name one museum there."
        timeout = 20 if args.turn_before_dead else 40
        with GlimpseClient(addr["frontend"], timeout=timeout) as client:
            s1 = client.session("netns-s1", max_tokens=12)
            r1 = s1.send(q1).result()
            log(f"turn 1: {r1.source} on {r1.worker}, reused {r1.reused_tokens}")
            expect(r1.source == "recompute" and r1.worker in workers,
                   "turn 1 recomputed on a decode worker in another namespace")
            x = r1.worker
            y = "d2" if x == "d1" else "d1"

            # 2. Cut X's link.
            link(host_of[x], "down")
            if not args.turn_before_dead:
                await_decode({y}, 15)
            try:
                r2 = s1.send(q2).result()
            except GlimpseError as e:
                log(f"turn 2 failed: {e.code}: {e.message}")
                expect(e.code == "UNAVAILABLE" and f"decode worker {x}" in e.message,
                       f"turn 2 routed to the cut worker fails UNAVAILABLE naming {x}")
                # On a loaded machine y's heartbeats (every 300 ms) can be late enough for y to be
                # declared dead for a moment too; it registers again. Retry once it is listed.
                await_decode({y}, 15)
                r2 = s1.send(q2).result()  # the session did not grow: same turn again
            log(f"turn 2: {r2.source} on {r2.worker}, reused {r2.reused_tokens}")
            expect(r2.worker == y and r2.source == "warm" and r2.reused_tokens > 0,
                   f"turn 2 continues on {y} from the warm tier (turn 1's state not lost)")

            # 3. Restore X's link: X registers again.
            link(host_of[x], "up")
            await_decode({"d1", "d2"}, 20)

            # 4. The cache node's link flaps for FLAP_S during a turn that needs it (a new
            # session replaying the conversation: Lookup, Get, then Put of the new state).
            replay = [q1, r1.text, q2]

            def replay_session(sid: str):
                s = client.session(sid, max_tokens=12)
                s.add_message("user", replay[0])
                s.add_message("assistant", replay[1])
                return s

            outcome: Dict[str, object] = {}

            def flap_turn() -> None:
                t0 = time.monotonic()
                try:
                    outcome["result"] = replay_session("netns-s2").send(replay[2]).result()
                except GlimpseError as e:
                    outcome["error"] = e
                outcome["seconds"] = time.monotonic() - t0

            link("b", "down")
            turn = threading.Thread(target=flap_turn, daemon=True)
            turn.start()
            time.sleep(FLAP_S)
            link("b", "up")
            turn.join(45)
            expect(not turn.is_alive(), "the turn during the cache node's flap ends within 45 s")
            if "result" in outcome:
                r = outcome["result"]
                log(f"turn during the flap: {r.source} on {r.worker}, reused {r.reused_tokens}, "
                    f"{outcome['seconds']:.1f} s")
            else:
                e = outcome["error"]
                log(f"turn during the flap: {e.code}: {e.message} ({outcome['seconds']:.1f} s)")
                expect(e.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED") and e.message,
                       "the turn during the cache node's flap fails with a clear error")

            # 5. With the link back, the acknowledged state is served warm (a first call on a
            # channel broken by the flap may still miss and recompute: up to 3 fresh sessions).
            r3 = None
            for attempt in range(3):
                try:
                    r3 = replay_session(f"netns-s3-{attempt}").send(replay[2]).result()
                    log(f"replay {attempt + 1} after the flap: {r3.source} on {r3.worker}, "
                        f"reused {r3.reused_tokens}")
                    if r3.source == "warm":
                        break
                except GlimpseError as e:
                    log(f"replay {attempt + 1} after the flap: {e.code}: {e.message}")
                time.sleep(0.5)
            expect(r3 is not None and r3.source == "warm"
                   and r3.reused_tokens == r2.reused_tokens,
                   "after the flap the acknowledged state is served warm (same reuse as turn 2)")
        log(f"checks done in {time.monotonic() - start:.1f} s")
        return 0
    except (Failure, RuntimeError, GlimpseError, subprocess.SubprocessError) as e:
        log(f"FAILED: {type(e).__name__}: {e}")
        for s in services:
            print(f"--- {s.name} log (tail) ---\n{s.tail()}", flush=True)
        return 1
    finally:
        for s in reversed(services):
            s.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", default=str(Path(__file__).resolve().parent.parent))
    p.add_argument("--glimpse", default="", help="the CLI (accepted, not used: the client is "
                   "clients/python)")
    for b in ("coordinator", "cache-node", "decode-worker", "frontend"):
        p.add_argument(f"--{b}", required=True)
    p.add_argument("--turn-before-dead", action="store_true",
                   help="send turn 2 right after the cut, before the coordinator declares the "
                   "worker dead: the frontend's call to the cut worker must fail UNAVAILABLE "
                   "naming it (gRPC keepalive, core/common/grpc/server.h), then the turn again "
                   "goes warm to the other worker; without it, turn 2 waits for the dead "
                   "declaration and goes warm at once")
    p.add_argument("--inner", action="store_true")
    p.add_argument("--work", default="")
    for h in ["sw", *HOSTS]:
        p.add_argument(f"--ns-{h}", default="")
    args = p.parse_args()
    if args.inner:
        return inner(args)
    return outer(args, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
