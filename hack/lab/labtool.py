#!/usr/bin/env python3
"""Small stdlib-only helpers for the sandprobe network lab.

  labtool.py serve --map ADDR=NAME ... [--cert C --key K] [--ready FILE]
      HTTP on :80 and HTTPS on :443 (dual-stack, bound to [::]) answering
      every request with a body naming the host that was reached.
  labtool.py dns NAME [A|AAAA] --server IP [--timeout S]
      one UDP DNS query; prints "RCODE addr addr ..." (no resolver library,
      so NXDOMAIN and REFUSED can be told apart without dnsutils).
  labtool.py connect HOST PORT [--timeout S]
      one TCP connect; prints OK or the errno name (ETIMEDOUT on timeout).
  labtool.py sweep KEY=HOST:PORT ... [--timeout S]
      all connects concurrently; prints "KEY RESULT" per target, in the given
      order. RESULT is OK:<name the listener gave in its body> or an errno.
  labtool.py authority --listen ADDR ... --record NAME=IP ... --wildcard ZONE=IP
                       --log FILE [--ready FILE]
      the lab's stand-in for the DNS authorities of the internet: UDP and TCP
      53 on every ADDR, answers its records (and every name under a wildcard
      zone), NXDOMAIN for any other name, and logs every query it is asked
      ("proto client qtype name rcode"), so a test can see what left.
"""
import argparse
import errno
import select
import http.server
import ipaddress
import os
import random
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time


def norm(addr):
    try:
        ip = ipaddress.ip_address(addr.split("%")[0])
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.compressed


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "sandprobe-lab/1"
    sys_version = ""
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):  # quiet: the lab is hit concurrently
        pass

    def _answer(self, body_wanted=True):
        local = norm(self.connection.getsockname()[0])
        name = self.server.names.get(local, local)
        scheme = "https" if self.server.tls else "http"
        # A front serves several names: say which one the client asked for,
        # in the ClientHello (sni) and in the request (hostheader).
        asked = ""
        if self.server.tls:
            asked = " sni=%s" % (getattr(self.connection, "lab_sni", None) or "-")
        asked += " hostheader=%s" % (self.headers.get("Host") or "-").replace(" ", "")
        body = ("sandprobe-lab host=%s addr=%s port=%d scheme=%s%s\n"
                % (name, local, self.server.server_address[1], scheme, asked)).encode()
        if self.server.served is not None:
            # the lab's own record of what it served: the name asked for
            # (SNI, else the Host header, else the address's name)
            sni = getattr(self.connection, "lab_sni", None) if self.server.tls else None
            host = sni or (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]") or name
            line = "%.3f %s %s %d %s %s\n" % (time.time(), norm(self.client_address[0]), host.lower(),
                                               self.server.server_address[1], scheme, self.path.split(" ")[0])
            with self.server.served_lock:
                self.server.served.write(line)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Lab-Host", name)
        self.send_header("Connection", "close")
        self.end_headers()
        if body_wanted:
            self.wfile.write(body)

    def do_GET(self):
        self._answer()

    do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    def do_HEAD(self):
        self._answer(False)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, port, names, ctx, served=None):
        self.names = names
        self.served = served
        self.served_lock = threading.Lock()
        self.ctx = ctx
        self.tls = ctx is not None
        super().__init__(("::", port), Handler)

    def server_bind(self):
        # dual-stack; and no HTTPServer.server_bind: its getfqdn() would do a
        # reverse DNS lookup through the host's resolv.conf.
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        socketserver.TCPServer.server_bind(self)
        self.server_name = "sandprobe-lab"
        self.server_port = self.server_address[1]

    def finish_request(self, request, client_address):
        # runs in the per-connection thread: the TLS handshake happens here,
        # so a slow or silent client never blocks the accept loop.
        request.settimeout(15)
        if self.ctx is not None:
            try:
                request = self.ctx.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError):
                return
        try:
            self.RequestHandlerClass(request, client_address, self)
        finally:
            try:
                request.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        pass


def remember_sni(sock, name, _ctx):
    # one certificate for every name (the front's SANs); only remember it
    sock.lab_sni = name
    return None


def cmd_serve(a):
    names = {}
    for m in a.map:
        addr, _, name = m.partition("=")
        names[norm(addr)] = name
    ctx = None
    if a.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)
        ctx.sni_callback = remember_sni
    served = open(a.served, "a", buffering=1) if a.served else None
    servers = [Server(a.http_port, names, None, served)]
    if ctx is not None:
        servers.append(Server(a.https_port, names, ctx, served))
    threads = []
    for s in servers:
        t = threading.Thread(target=s.serve_forever, daemon=True)
        t.start()
        threads.append(t)
    if a.ready:
        with open(a.ready + ".tmp", "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(a.ready + ".tmp", a.ready)
    for t in threads:
        t.join()


QTYPES = {"A": 1, "AAAA": 28, "TXT": 16, "MX": 15, "ANY": 255}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


def skip_name(buf, off):
    while True:
        n = buf[off]
        if n == 0:
            return off + 1
        if n & 0xC0 == 0xC0:
            return off + 2
        off += n + 1


def cmd_dns(a):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in a.name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", QTYPES[a.type.upper()], 1)
    fam = socket.AF_INET6 if ":" in a.server else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(a.timeout)
    try:
        s.sendto(q, (a.server, a.port))
        while True:
            buf, _ = s.recvfrom(4096)
            if len(buf) >= 12 and struct.unpack(">H", buf[:2])[0] == qid:
                break
    except socket.timeout:
        print("TIMEOUT")
        return 0
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e)))
        return 0
    flags, qd, an = struct.unpack(">HHH", buf[2:8])
    rcode = RCODES.get(flags & 0xF, "RCODE%d" % (flags & 0xF))
    off = 12
    for _ in range(qd):
        off = skip_name(buf, off) + 4
    out = [rcode]
    for _ in range(an):
        off = skip_name(buf, off)
        rtype, _cls, _ttl, rdlen = struct.unpack(">HHIH", buf[off:off + 10])
        off += 10
        rdata = buf[off:off + rdlen]
        off += rdlen
        if rtype == 1:
            out.append(socket.inet_ntop(socket.AF_INET, rdata))
        elif rtype == 28:
            out.append(socket.inet_ntop(socket.AF_INET6, rdata))
    print(" ".join(out))
    return 0


def cmd_connect(a):
    fam = socket.AF_INET6 if ":" in a.host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(a.timeout)
    try:
        s.connect((a.host, a.port))
        print("OK")
    except socket.timeout:
        print("ETIMEDOUT")
    except OSError as e:
        print(errno.errorcode.get(e.errno, "E?%s" % e.errno))
    finally:
        s.close()
    return 0


def probe(host, port, timeout):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((host, port))
        s.sendall(b"GET / HTTP/1.0\r\nHost: probe\r\n\r\n")
        data = b""
        while len(data) < 65536:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        text = data.decode("latin-1")
        for word in text.split():
            if word.startswith("host="):
                return "OK:" + word[5:]
        return "OK:?"
    except socket.timeout:
        return "ETIMEDOUT"
    except OSError as e:
        return errno.errorcode.get(e.errno, "E?%s" % e.errno)
    finally:
        s.close()


def cmd_sweep(a):
    results = {}
    threads = []
    order = []
    for t in a.targets:
        key, _, hp = t.partition("=")
        host, _, port = hp.rpartition(":")
        host = host.strip("[]")
        order.append(key)

        def run(key=key, host=host, port=int(port)):
            results[key] = probe(host, port, a.timeout)
        th = threading.Thread(target=run)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    for key in order:
        print(key, results.get(key, "E?"))
    return 0


def dns_name(buf, off):
    labels = []
    while True:
        n = buf[off]
        if n == 0:
            return ".".join(labels).lower(), off + 1
        if n & 0xC0 == 0xC0:
            return ".".join(labels).lower(), off + 2  # no compression in questions
        labels.append(buf[off + 1:off + 1 + n].decode("latin-1"))
        off += n + 1


class Authority:
    def __init__(self, records, wildcards, log):
        self.records, self.wildcards = records, wildcards
        self.log = open(log, "a", buffering=1)
        self.lock = threading.Lock()

    def lookup(self, name):
        if name in self.records:
            return self.records[name]
        for zone, addrs in self.wildcards.items():
            if name.endswith("." + zone):
                return addrs
        return None

    def answer(self, req, proto, client):
        if len(req) < 12:
            return None
        qid, flags, qd = struct.unpack(">HHH", req[:6])
        if qd != 1:
            return None
        name, off = dns_name(req, 12)
        qtype, qclass = struct.unpack(">HH", req[off:off + 4])
        question = req[12:off + 4]
        addrs = self.lookup(name)
        answers = []
        if addrs is not None:
            for a in addrs:
                fam = socket.AF_INET6 if ":" in a else socket.AF_INET
                if (fam == socket.AF_INET and qtype == 1) or (fam == socket.AF_INET6 and qtype == 28):
                    rdata = socket.inet_pton(fam, a)
                    answers.append(b"\xc0\x0c" + struct.pack(">HHIH", qtype, 1, 30, len(rdata)) + rdata)
        rcode = 0 if addrs is not None else 3
        with self.lock:
            self.log.write("%s %s %s %s %s\n" % (proto, client, {1: "A", 28: "AAAA"}.get(qtype, qtype), name,
                                                  "NOERROR" if rcode == 0 else "NXDOMAIN"))
        rd = flags & 0x0100
        hdr = struct.pack(">HHHHHH", qid, 0x8400 | rd | rcode, 1, len(answers), 0, 0)
        return hdr + question + b"".join(answers)


def cmd_authority(a):
    records, wildcards = {}, {}
    for r in a.record:
        name, _, ips = r.partition("=")
        records.setdefault(name.lower(), []).extend(ips.split(","))
    for w in a.wildcard:
        zone, _, ips = w.partition("=")
        wildcards[zone.lower()] = ips.split(",")
    auth = Authority(records, wildcards, a.log)
    # One UDP socket per address: an answer must come from the address the
    # question went to, or a connected client drops it.
    udp = []
    for addr in a.listen:
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.bind((addr, a.port))
        udp.append(s)
    tcp = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    tcp.bind(("::", a.port))
    tcp.listen(256)

    def serve_tcp(c, peer):
        c.settimeout(5)
        try:
            while True:
                n = c.recv(2)
                if len(n) < 2:
                    return
                want = struct.unpack(">H", n)[0]
                req = b""
                while len(req) < want:
                    chunk = c.recv(want - len(req))
                    if not chunk:
                        return
                    req += chunk
                out = auth.answer(req, "tcp", norm(peer[0]))
                if out is None:
                    return
                c.sendall(struct.pack(">H", len(out)) + out)
        except OSError:
            pass
        finally:
            c.close()

    if a.ready:
        with open(a.ready + ".tmp", "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(a.ready + ".tmp", a.ready)
    while True:
        ready, _, _ = select.select(udp + [tcp], [], [])
        for s in ready:
            if s is tcp:
                c, peer = tcp.accept()
                threading.Thread(target=serve_tcp, args=(c, peer), daemon=True).start()
                continue
            try:
                req, peer = s.recvfrom(4096)
            except OSError:
                continue
            out = auth.answer(req, "udp", norm(peer[0]))
            if out is not None:
                s.sendto(out, peer)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--map", action="append", default=[])
    s.add_argument("--cert")
    s.add_argument("--key")
    s.add_argument("--http-port", type=int, default=80)
    s.add_argument("--https-port", type=int, default=443)
    s.add_argument("--ready")
    s.add_argument("--served", help="append one line per request answered: time client host port scheme path")
    d = sub.add_parser("dns")
    d.add_argument("name")
    d.add_argument("type", nargs="?", default="A")
    d.add_argument("--server", required=True)
    d.add_argument("--port", type=int, default=53)
    d.add_argument("--timeout", type=float, default=2)
    c = sub.add_parser("connect")
    c.add_argument("host")
    c.add_argument("port", type=int)
    c.add_argument("--timeout", type=float, default=2)
    w = sub.add_parser("sweep")
    w.add_argument("targets", nargs="+")
    w.add_argument("--timeout", type=float, default=2)
    u = sub.add_parser("authority")
    u.add_argument("--listen", action="append", default=[])
    u.add_argument("--port", type=int, default=53)
    u.add_argument("--record", action="append", default=[])
    u.add_argument("--wildcard", action="append", default=[])
    u.add_argument("--log", required=True)
    u.add_argument("--ready")
    a = p.parse_args()
    return {"serve": cmd_serve, "dns": cmd_dns, "connect": cmd_connect, "sweep": cmd_sweep,
            "authority": cmd_authority}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
