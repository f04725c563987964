#!/usr/bin/env python3
"""The cluster soak (`make soak-cluster`): the five services, built with a sanitizer, on loopback
over mutual TLS, serve mixed traffic for MINUTES while a random member (a decode worker, the
prefill worker, the cache node or the coordinator) is SIGKILLed and restarted every KILL_EVERY
seconds. Client threads run multi-turn sessions through the frontend (random token ids, random
lengths and eviction policies, some with tool hints); a turn that fails is counted by its gRPC
code and the session goes on. At the end every session's last acknowledged conversation is sent
again, one token longer, as a new session: it must start warm from the cache node (an
acknowledged state that is gone counts as lost, goal 0). Token ids rather than chat text, so that
the replay is exactly the acknowledged tokens (re-rendered text may tokenize otherwise). Any sanitizer report in a service's log, or a service that exits by itself, fails the run.

Prints and writes (--report) the requests served, errors by code, states lost, restarts and each
service's peak RSS.

  cluster_soak.py --bin-dir BUILD --source REPO [--minutes 30] [--kill-every 30] [--clients 3]
"""
import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SANITIZER_MARKS = ("ERROR: AddressSanitizer", "WARNING: ThreadSanitizer", "runtime error:",
                   "ERROR: LeakSanitizer")
VOCAB = (100, 49000)  # ids the default model (SmolLM2, 49,152) takes as plain tokens
POLICIES = [None, ("snapkv", 0.5, "int8"), ("streamingllm", 0.5, "fp16"), ("h2o", 0.3, "kivi4")]


def log(msg):
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Member:
    """One service process; restart() starts it again with the same flags (same id and paths)."""

    def __init__(self, name, binary, flags, work, env):
        self.name, self.binary, self.flags, self.env = name, binary, flags, env
        self.log_path = work / "logs" / f"{name}.log"
        self.proc = None
        self.peak_rss_kib = 0
        self.restarts = 0
        self.grpc_port = None

    def start(self, timeout=300):
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, *self.flags], stdout=out,
                                     stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                for line in f.read().decode(errors="replace").splitlines():
                    if '"msg":"serving"' in line:
                        self.grpc_port = json.loads(line)["grpc_port"]
                        return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode} before serving")
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not serve within {timeout} s")

    def sample_rss(self):
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_rss_kib = max(self.peak_rss_kib, int(line.split()[1]))
        except (OSError, ValueError):
            pass

    def kill_and_restart(self):
        self.sample_rss()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        time.sleep(random.uniform(0.5, 2.0))
        self.restarts += 1
        self.start()

    def stop(self):
        self.sample_rss()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def died_by_itself(self):
        return self.proc.poll() is not None

    def sanitizer_reports(self):
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [m for m in SANITIZER_MARKS if m in text]


def make_cluster(args, work, env, started):
    tls = work / "tls"
    subprocess.run([str(Path(args.bin_dir) / "tools/cli/glimpse"), "certs", "--dir", str(tls),
                    "--members", "coordinator/*,cache/cache-0,decode/d1,decode/d2,prefill/p1,"
                    "frontend/*"], check=True, capture_output=True, timeout=120)

    def tls_flags(cert, serves=True, calls=True):
        files = [tls / f"{cert}.pem", tls / f"{cert}.key", tls / "ca.pem"]
        flags = []
        if serves:
            flags += [f"--tls.cert={files[0]}", f"--tls.key={files[1]}",
                      f"--tls.client_ca={files[2]}"]
        if calls:
            flags += [f"--client_tls.cert={files[0]}", f"--client_tls.key={files[1]}",
                      f"--client_tls.ca={files[2]}"]
        return flags

    def binary(folder, name):
        return str(Path(args.bin_dir) / folder / name)

    coordinator_port = free_port()
    cache_port = free_port()
    coordinator = f"127.0.0.1:{coordinator_port}"
    cache = f"127.0.0.1:{cache_port}"
    common = ["--shutdown_grace=2s", "--metrics_listen=127.0.0.1:0"]
    members = [Member("coordinator", binary("coordinator", "glimpse-coordinator"),
                      [f"--listen={coordinator}", f"--store.path={work / 'coordinator'}",
                       "--membership.heartbeat_interval=500ms",
                       *tls_flags("coordinator", calls=False), *common], work, env),
               Member("cache-node", binary("cache-node", "glimpse-cache-node"),
                      [f"--listen={cache}", f"--storage.path={work / 'cache'}",
                       f"--coordinator={coordinator}", "--node_id=cache-0",
                       *tls_flags("cache-cache-0"), *common], work, env)]
    worker = [f"--coordinator={coordinator}", f"--cache_node={cache}", "--threads=1",
              "--kv_memory=128MiB", "--listen=127.0.0.1:0"]
    for node in ("d1", "d2"):
        members.append(Member(f"decode-{node}", binary("decode-worker", "glimpse-decode-worker"),
                              [*worker, f"--node_id={node}", *tls_flags(f"decode-{node}"),
                               *common], work, env))
    members.append(Member("prefill-p1", binary("prefill-worker", "glimpse-prefill-worker"),
                          [*worker, "--node_id=p1", *tls_flags("prefill-p1"), *common],
                          work, env))
    frontend = Member("frontend", binary("frontend", "glimpse-frontend"),
                      [f"--coordinator={coordinator}", "--listen=127.0.0.1:0",
                       f"--auth.salt_secret_file={work / 'salt'}",
                       *tls_flags("frontend", serves=False), *common], work, env)
    (work / "salt").write_text("a-soak-test-salt-secret-of-enough-bytes\n")
    started.extend([*members, frontend])
    for m in members:
        m.start()
        log(f"{m.name} serving on {m.grpc_port}")
    frontend.start()
    log(f"frontend serving on {frontend.grpc_port}")
    return members, frontend


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.served = 0
        self.errors = collections.Counter()
        self.acknowledged = []  # (session id, token ids of its last acknowledged turn, policy)
        self.unstored = 0  # turns served whose state no cache node took (TurnDone without it)

    def ok(self):
        with self.lock:
            self.served += 1

    def error(self, code):
        with self.lock:
            self.errors[code] += 1


def client_loop(index, address, stop, stats, GlimpseClient, GlimpseError):
    rng = random.Random(index)
    with GlimpseClient(address, timeout=600) as client:
        n = 0
        while not stop.is_set():
            n += 1
            policy = rng.choice(POLICIES)
            kwargs = {"max_tokens": rng.randint(4, 24)}
            if policy:
                kwargs.update(policy=policy[0], budget=policy[1], codec=policy[2])
            session = client.session(f"soak-{index}-{n}", **kwargs)
            last = None
            for _ in range(rng.randint(1, 5)):
                if stop.is_set():
                    break
                tool = rng.choice([None, None, "search"])
                ids = [rng.randrange(*VOCAB) for _ in range(rng.randint(8, 160))]
                try:
                    r = session.send_tokens(ids, tool=tool,
                                            expected_tool_s=0.5 if tool else None).result()
                    stats.ok()
                    if r.state_bytes > 0:  # acknowledged as stored (0: the node was down)
                        last = list(session.tokens)
                    else:
                        stats.unstored += 1
                except GlimpseError as e:
                    stats.error(e.code)
                    time.sleep(0.5)  # a member is restarting: do not spin on its absence
            if last:
                with stats.lock:
                    stats.acknowledged.append((f"soak-{index}-{n}", last, kwargs))


def replay_lost(address, stats, GlimpseClient, GlimpseError):
    """Replays each session's last acknowledged conversation as a new session: it must be warm."""
    lost = []
    with GlimpseClient(address, timeout=600) as client:
        for sid, tokens, kwargs in stats.acknowledged:
            session = client.session(f"replay-{sid}", **{**kwargs, "max_tokens": 2})
            try:
                r = session.send_tokens([*tokens, VOCAB[0]]).result()
            except GlimpseError as e:
                lost.append((sid, f"replay failed: {e.code}"))
                continue
            # A new session reuses stored KV only if the acknowledged state is on the cache node:
            # loaded by the decode worker (warm) or by the prefill worker that prefilled it.
            reused = (r.prefill_reused_tokens if r.source == "prefill_worker"
                      else r.reused_tokens if r.source == "warm" else 0)
            if reused == 0:
                lost.append((sid, f"replay started {r.source} "
                                  f"(prefill worker: {r.prefill_source or '-'}), reused 0"))
    return lost


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--work", default="")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--kill-every", type=float, default=30)
    p.add_argument("--clients", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--report", default="")
    args = p.parse_args()
    random.seed(args.seed)
    sys.path.insert(0, str(Path(args.source) / "clients" / "python"))
    import build_protos  # noqa: E402
    build_protos.main(["--quiet"])
    from glimpse_client import GlimpseClient, GlimpseError  # noqa: E402

    work = Path(args.work or f"/tmp/glimpse-soak-{os.getpid()}")
    (work / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # SIGTERM (a timeout, Ctrl-C's cousin) ends the run through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = []
    try:
        return run(args, work, env, started, GlimpseClient, GlimpseError)
    finally:
        for m in started:  # every service, whatever ended the run
            if m.proc and m.proc.poll() is None:
                m.proc.kill()


def run(args, work, env, started, GlimpseClient, GlimpseError):
    members, frontend = make_cluster(args, work, env, started)
    address = f"127.0.0.1:{frontend.grpc_port}"
    stats, stop = Stats(), threading.Event()
    clients = [threading.Thread(target=client_loop, daemon=True,
                                args=(i, address, stop, stats, GlimpseClient, GlimpseError))
               for i in range(args.clients)]
    for t in clients:
        t.start()
    end = time.monotonic() + args.minutes * 60
    failures = []
    next_kill = time.monotonic() + args.kill_every
    while time.monotonic() < end and not failures:
        time.sleep(1)
        for m in [*members, frontend]:
            m.sample_rss()
            if m.died_by_itself():
                failures.append(f"{m.name} exited {m.proc.returncode} by itself")
        if time.monotonic() >= next_kill and not failures:
            victim = random.choice(members)
            log(f"SIGKILL {victim.name}; served {stats.served}, errors {dict(stats.errors)}")
            try:
                victim.kill_and_restart()
            except RuntimeError as e:
                failures.append(str(e))
            next_kill = time.monotonic() + args.kill_every
    stop.set()
    for t in clients:
        t.join(timeout=900)
    lost = replay_lost(address, stats, GlimpseClient, GlimpseError) if not failures else []
    for m in [frontend, *reversed(members)]:
        m.stop()
    for m in [*members, frontend]:
        for mark in m.sanitizer_reports():
            failures.append(f"{m.name}: {mark} (log {m.log_path})")
    report = {
        "minutes": args.minutes, "requests_served": stats.served,
        "errors_by_code": dict(stats.errors), "turns_not_stored": stats.unstored,
        "sessions_checked": len(stats.acknowledged),
        "acknowledged_states_lost": len(lost), "lost": lost[:20],
        "restarts": {m.name: m.restarts for m in members},
        "peak_rss_mib": {m.name: round(m.peak_rss_kib / 1024, 1) for m in [*members, frontend]},
        "failures": failures, "work": str(work),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        Path(args.report).write_text(text + "\n")
    ok = not failures and not lost and stats.served > 0
    log("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
