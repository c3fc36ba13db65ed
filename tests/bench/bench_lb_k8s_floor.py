#!/usr/bin/python3
# tests/bench/bench_lb_k8s_floor.py - the floor under bench_lb_k8s_mem.sh's
# figure: the test API server's own time to serve every LIST page of the
# given collections, each on a keep-alive connection of its own and all at
# once (as the k8s module lists them), the bodies read and not parsed (the
# continue token is taken from the page's head). Prints the seconds, pages
# and bytes. Usage: bench_lb_k8s_floor.py PORT TOKEN LIMIT PATH...
import http.client
import sys
import threading
import time
import urllib.parse


def fetch(port, token, limit, path, out):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    cont, pages, nbytes = None, 0, 0
    while True:
        q = "%s?limit=%d" % (path, limit)
        if cont:
            q += "&continue=" + urllib.parse.quote(cont, safe="")
        conn.request("GET", q, headers={"Authorization": "Bearer " + token})
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise SystemExit("GET %s: HTTP %d" % (q, resp.status))
        pages += 1
        nbytes += len(body)
        head = body[:1024]  # the list's metadata comes before its items
        at = head.find(b'"continue":"')
        cont = head[at + 12:head.index(b'"', at + 12)].decode() if at >= 0 else None
        if not cont:
            break
    out[path] = (pages, nbytes)


def main():
    port, token, limit, paths = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    out = {}
    threads = [threading.Thread(target=fetch, args=(port, token, limit, p, out)) for p in paths]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    if len(out) != len(paths):
        raise SystemExit("a list failed")
    print("%.3f %d %d" % (secs, sum(p for p, _ in out.values()), sum(b for _, b in out.values())))


if __name__ == "__main__":
    main()
