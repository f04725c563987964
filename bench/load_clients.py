"""Runs N clients at once, one thread each: the fan-out the load benchmarks share."""
import threading
import time


def run_clients(n, client):
    """Calls client(k) for k in 0..n-1 on n threads at once; returns ([results], wall seconds).
    The first client that raised is re-raised as RuntimeError naming it."""
    results, errors = [None] * n, [None] * n

    def one(k):
        try:
            results[k] = client(k)
        except Exception as e:  # reported below, with the client
            errors[k] = e

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    for k, e in enumerate(errors):
        if e is not None:
            raise RuntimeError(f"client {k}: {e}")
    return results, wall
