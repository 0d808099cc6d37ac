#!/usr/bin/env python3
"""A loopback HTTP/1.1 file server that waits a set time before every response.

usage: slow_server.py DIR PORT DELAY_MS [LOGFILE]

Serves DIR on 127.0.0.1:PORT with keep-alive, Content-Length, ETag and Last-Modified,
answering If-None-Match with 304. It logs one line per request ("METHOD PATH STATUS
BODYBYTES") to LOGFILE, so a benchmark can count the asset bodies transferred. A POST
(a report's batch) is read and answered 204.
"""
import hashlib
import http.server
import os
import socket
import socketserver
import sys
import threading
import time
from email.utils import formatdate

root, port, delay = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) / 1000.0
logfile = sys.argv[4] if len(sys.argv) > 4 else None
lock = threading.Lock()


def log(line):
    if logfile:
        with lock, open(logfile, "a") as f:
            f.write(line + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # As production servers do: no Nagle stall between the headers and the body.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self):
        time.sleep(delay)
        path = os.path.normpath(os.path.join(root, self.path.split("?")[0].lstrip("/")))
        if not path.startswith(os.path.abspath(root)) or not os.path.isfile(path):
            body = b"not found"
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            log(f"GET {self.path} 404 {len(body)}")
            return
        st = os.stat(path)
        etag = '"%s"' % hashlib.md5(f"{st.st_size}-{st.st_mtime_ns}".encode()).hexdigest()[:16]
        if self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            log(f"GET {self.path} 304 0")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(st.st_size))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", formatdate(st.st_mtime, usegmt=True))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        with open(path, "rb") as f:
            while True:
                chunk = f.read(65536)
                if not chunk:
                    break
                self.wfile.write(chunk)
        log(f"GET {self.path} 200 {st.st_size}")

    def do_POST(self):
        time.sleep(delay)
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        self.send_response(204)
        self.end_headers()
        log(f"POST {self.path} 204 {length}")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


Server(("127.0.0.1", port), Handler).serve_forever()
