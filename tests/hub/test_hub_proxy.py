"""Proxies from the environment are honoured (requests' trust_env), including the CDN hop."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from hub_fake_server import tiny_gguf

from runtime.hub.fetch import Target


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[str]

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.seen.append(self.path)  # absolute URI: proxied request
        u = urlsplit(self.path)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        headers = {k: v for k, v in self.headers.items() if not k.lower().startswith("proxy-")}
        conn.request("GET", u.path + (f"?{u.query}" if u.query else ""), headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        conn.close()


def test_http_proxy_from_environment_is_used(hub, make_fetcher, monkeypatch):
    content = tiny_gguf(seed=40)
    hub.add("prism-ml/Proxied", "m.gguf", content)
    seen: list[str] = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), type("P", (_Proxy,), {"seen": seen}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        for var in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{srv.server_address[1]}")
        result = make_fetcher("modelscope").fetch(Target(filename="m.gguf", ms_repo="prism-ml/Proxied"))
    finally:
        srv.shutdown()
        srv.server_close()
    assert result.installed.path.read_bytes() == content
    assert any("/api/v1/models/prism-ml/Proxied/repo/files" in p for p in seen)
    assert any(p.startswith(hub.cdn_url + "/blob/") for p in seen)  # the CDN hop went through the proxy too
