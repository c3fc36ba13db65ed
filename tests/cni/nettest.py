#!/usr/bin/env python3
"""tests/cni/nettest.py - traffic helpers of the fibril-cni tests, run
inside a pod's (or the node's) network namespace with `ip netns exec`:

  serve PORT                 accept TCP connections, answer "ok\\n", forever
  probe PORT TARGET...       ping (one echo, ping(8)) and TCP-connect to PORT
                             on every target at once; one "FAIL ..." line per
                             failure, then "N ok, M failed"; exit 1 on any
  recv PORT STATUSFILE       accept one TCP stream, count its bytes; the
                             status file holds "bytes=N reset=0|1 eof=0|1"
  send HOST PORT STATUSFILE  send a steady stream (64 KiB every 10 ms) until
                             killed; status "bytes=N reset=0|1 error=..."
  sink PORT                  accept TCP connections (IPv4 and IPv6), read
                             each to its end and answer the byte count
  bulk HOST PORT BYTES       send BYTES as fast as TCP goes to a sink, close
                             the sending side; exit 0 when the sink counted
                             them all (a full-size segment that never
                             arrives stalls it: 30 s, then exit 1)

serve and sink listen on BIND (default 0.0.0.0; "::" takes both families).

Every socket operation has a timeout, so nothing hangs a test."""
import os
import socket
import subprocess
import sys
import threading
import time


def serve(port):
    srv = socket.socket(socket.AF_INET6 if ":" in os.environ.get("BIND", "") else socket.AF_INET)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((os.environ.get("BIND", "0.0.0.0"), port))
    srv.listen(128)
    while True:
        conn, _ = srv.accept()
        try:
            conn.sendall(b"ok\n")
        except OSError:
            pass
        conn.close()


def listener(port, backlog):
    bind = os.environ.get("BIND", "0.0.0.0")
    srv = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(backlog)
    return srv


def sink(port):
    srv = listener(port, 16)

    def drain(conn):
        total = 0
        try:
            conn.settimeout(30)
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    break
                total += len(data)
            conn.sendall(b"%d\n" % total)
        except OSError:
            pass
        conn.close()

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


def bulk(host, port, nbytes):
    chunk = b"x" * 65536
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.settimeout(30)
            left = nbytes
            while left > 0:
                n = min(left, len(chunk))
                s.sendall(chunk[:n])
                left -= n
            s.shutdown(socket.SHUT_WR)
            answer = b""
            while not answer.endswith(b"\n"):
                data = s.recv(64)
                if not data:
                    break
                answer += data
    except OSError as e:
        print("FAIL bulk %s:%d: %s" % (host, port, e))
        return 1
    if answer.strip() != b"%d" % nbytes:
        print("FAIL bulk %s:%d: the sink counted %r of %d bytes" % (host, port, answer, nbytes))
        return 1
    print("bulk %s:%d: %d bytes" % (host, port, nbytes))
    return 0


def probe(port, targets):
    failures = []
    lock = threading.Lock()

    def one(target):
        r = subprocess.run(["ping", "-c", "1", "-W", "2", target], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if r.returncode != 0:
            with lock:
                failures.append("FAIL ping %s" % target)
        for attempt in range(3):
            try:
                with socket.create_connection((target, port), timeout=3) as s:
                    s.settimeout(3)
                    if s.recv(3) == b"ok\n":
                        return
                    err = "bad answer"
            except OSError as e:
                err = str(e)
            time.sleep(0.2)  # sleep: a pause between the tries of a probe (a deadline's poll)
        with lock:
            failures.append("FAIL tcp %s:%d: %s" % (target, port, err))

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in failures:
        print(f)
    print("%d ok, %d failed" % (len(targets) * 2 - len(failures), len(failures)))
    return 1 if failures else 0


def write_status(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.rename(tmp, path)


def recv(port, status):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    write_status(status, "bytes=0 reset=0 eof=0 listening=1")
    conn, _ = srv.accept()
    total, reset, eof, last = 0, 0, 0, 0.0
    conn.settimeout(60)
    while True:
        try:
            data = conn.recv(1 << 16)
        except ConnectionResetError:
            reset = 1
            break
        except OSError:
            reset = 1
            break
        if not data:
            eof = 1
            break
        total += len(data)
        now = time.monotonic()
        if now - last > 0.05:
            write_status(status, "bytes=%d reset=0 eof=0" % total)
            last = now
    write_status(status, "bytes=%d reset=%d eof=%d" % (total, reset, eof))


def send(host, port, status):
    chunk = b"x" * 65536
    total = 0
    try:
        s = socket.create_connection((host, port), timeout=10)
        s.settimeout(30)
        last = 0.0
        while True:
            s.sendall(chunk)
            total += len(chunk)
            now = time.monotonic()
            if now - last > 0.05:
                write_status(status, "bytes=%d reset=0 error=" % total)
                last = now
            time.sleep(0.01)  # sleep: paces the stream (64 KiB every 10 ms at most)
    except OSError as e:
        write_status(status, "bytes=%d reset=1 error=%s" % (total, str(e).replace(" ", "_")))
        return 1


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "serve":
        serve(int(sys.argv[2]))
    elif cmd == "probe":
        sys.exit(probe(int(sys.argv[2]), sys.argv[3:]))
    elif cmd == "sink":
        sink(int(sys.argv[2]))
    elif cmd == "bulk":
        sys.exit(bulk(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    elif cmd == "recv":
        recv(int(sys.argv[2]), sys.argv[3])
    elif cmd == "send":
        sys.exit(send(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
