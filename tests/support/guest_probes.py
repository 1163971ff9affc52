"""Python snippets the network tests run inside a guest (through the agent's ``exec``).

Each prints one JSON object; the tests parse it. They are argv elements of ``python3 -c``, never
shell text.
"""

from __future__ import annotations

__all__ = ["DIRECT_PROBE", "PROXY_PROBE", "UDP_PROBE"]

DIRECT_PROBE = """
import json, socket, struct, sys
def default_gateway():
    try:
        with open("/proc/net/route") as table:
            for line in table.read().splitlines()[1:]:
                fields = line.split()
                if fields[1] == "00000000":
                    return socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
    except OSError:
        pass
    return None
gateway = default_gateway()
results = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    if host == "GATEWAY":
        if gateway is None:
            results[target] = "no default route"
            continue
        host = gateway
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        results[target] = "connected"
    except OSError as exc:
        results[target] = type(exc).__name__ + ": " + str(exc)
try:
    socket.getaddrinfo("deb.debian.org", 80)
    results["dns"] = "resolved"
except OSError as exc:
    results["dns"] = type(exc).__name__ + ": " + str(exc)
results["gateway"] = gateway
print(json.dumps(results))
"""
"""``python3 -c DIRECT_PROBE HOST:PORT ...``: try a direct TCP connection to each target (host
``GATEWAY``: the guest's default gateway) and one DNS lookup; prints ``{target: "connected" |
"<error>", "dns": "resolved" | "<error>", "gateway": address or null}``."""


PROXY_PROBE = """
import json, os, sys, urllib.error, urllib.request
# the proxy the guest's init put in the environment; NO_PROXY is not applied here: loopback
# names go to the proxy too (an allowed origin may be the HOST's localhost; otherwise the proxy
# must refuse them)
proxies = {"http": os.environ["http_proxy"], "https": os.environ["https_proxy"]}
no_proxy = [os.environ.pop(name, None) for name in ("no_proxy", "NO_PROXY")]
opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
results = {"env": proxies, "no_proxy": no_proxy}
for url in sys.argv[1:]:
    try:
        with opener.open(url, timeout=15) as reply:
            results[url] = [reply.status, reply.read().decode()]
    except urllib.error.HTTPError as exc:
        results[url] = [exc.code, ""]
    except OSError as exc:
        results[url] = [0, type(exc).__name__ + ": " + str(exc)]
print(json.dumps(results))
"""
"""GET each URL of argv through the guest's proxy: ``{url: [status, body or error]}``, plus the
proxy settings seen (``env``) and the NO_PROXY values removed (``no_proxy``)."""


UDP_PROBE = """
import json, socket, sys
results = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"cubicle-udp-probe", (host, int(port)))
        results[target] = "sent"
    except OSError as exc:
        results[target] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(results))
"""
"""``python3 -c UDP_PROBE HOST:PORT ...``: send one datagram to each target; prints ``{target:
"sent" | "<error>"}`` (a datagram "sent" may still go nowhere: the test checks what arrived)."""
