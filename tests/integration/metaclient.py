"""A client of the mini_3fs_metadata_server protocol that speaks exactly as
SGLang's Hf3fsGlobalMetadataClient does (requests.Session, the same retry
policy, JSON bodies with Content-Type application/json; `json` stands in
for orjson), plus a fixture-friendly runner for `pagefs serve-meta`."""
import json
import os
import signal
import socket
import subprocess

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

import pagefs_helpers as H


class MetaClient:
    def __init__(self, base_url, max_retries=3):
        self.base_url = base_url.rstrip("/")
        self._session = requests.Session()
        retry = Retry(total=max_retries, backoff_factor=0.3,
                      status_forcelist=[500, 502, 503, 504], allowed_methods=["GET", "POST"])
        adapter = HTTPAdapter(max_retries=retry, pool_connections=256, pool_maxsize=256)
        self._session.mount("http://", adapter)

    def _post(self, endpoint, json_data):
        url = f"{self.base_url}/{endpoint}"
        r = self._session.post(url, data=json.dumps(json_data),
                               headers={"Content-Type": "application/json"})
        r.raise_for_status()
        if r.status_code == 204 or not r.content:
            return {}
        return json.loads(r.content)

    def initialize(self, rank, num_pages, namespace="kv"):
        self._post(f"{rank}/initialize", {"num_pages": num_pages, "namespace": namespace})

    def reserve_and_allocate_page_indices(self, rank, keys, namespace="kv"):
        r = self._post(f"{rank}/reserve_and_allocate_page_indices",
                       {"keys": keys, "namespace": namespace})
        return [tuple(item) for item in r.get("indices")]

    def confirm_write(self, rank, written_keys_to_confirm, pages_to_release, namespace="kv"):
        self._post(f"{rank}/confirm_write",
                   {"written_keys_to_confirm": written_keys_to_confirm,
                    "pages_to_release": pages_to_release, "namespace": namespace})

    def delete_keys(self, rank, keys, namespace="kv"):
        self._post(f"{rank}/delete_keys", {"keys": keys, "namespace": namespace})

    def exists(self, rank, keys, namespace="kv"):
        return self._post(f"{rank}/exists", {"keys": keys, "namespace": namespace}).get("exists", [])

    def clear(self, rank, namespace="kv"):
        self._post(f"{rank}/clear", {"namespace": namespace})

    def get_page_indices(self, rank, keys, namespace="kv"):
        return self._post(f"{rank}/get_page_indices",
                          {"keys": keys, "namespace": namespace}).get("indices")

    # raw access for error cases: (status, parsed body or text)
    def raw(self, endpoint, body, method="POST"):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        r = requests.request(method, f"{self.base_url}/{endpoint}", data=data,
                             headers={"Content-Type": "application/json"}, timeout=30)
        try:
            return r.status_code, r.json() if r.content else None
        except ValueError:
            return r.status_code, r.text


def write_pages(data_file, keys, indices, page_size):
    """Writes random bytes for each key at page_index * page_size of the
    pool's data file, as SGLang's USRBIO client does; returns {key: bytes}."""
    data = {}
    fd = os.open(data_file, os.O_WRONLY)
    try:
        for k, idx in zip(keys, indices):
            data[k] = os.urandom(page_size)
            H.write_all(fd, data[k], idx * page_size)
    finally:
        os.close(fd)
    return data


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`pagefs serve-meta` on 127.0.0.1 (any free port), stopped by stop()."""

    def __init__(self, dir, *opts, backing=None, meta=None, env=None):
        self.dir = dir
        self.backing = backing or os.path.join(dir, "backing")
        os.makedirs(self.backing, exist_ok=True)
        self.meta = meta or f"sqlite:{os.path.join(dir, 'index.db')}"
        self.log = open(os.path.join(dir, "serve.log"), "w")
        env = dict(os.environ, **(env or {}))
        for var, stem in (("ASAN_OPTIONS", "asan"), ("UBSAN_OPTIONS", "ubsan"),
                          ("LSAN_OPTIONS", "lsan"), ("TSAN_OPTIONS", "tsan")):
            cur = env.get(var, "")
            if "log_path" not in cur:
                env[var] = (cur + ":" if cur else "") + f"log_path={os.path.join(dir, stem)}"
        self.proc = subprocess.Popen(
            H.wrapped([H.PAGEFS_BIN, "serve-meta", "--backing", self.backing, "--meta",
                       self.meta, "--listen", "127.0.0.1:0", *opts], dir),
            stdout=subprocess.PIPE, stderr=self.log, text=True, stdin=subprocess.DEVNULL, env=env)
        line = self.proc.stdout.readline()
        if "listening on http://" not in line:
            self.stop()
            raise AssertionError(f"serve-meta did not start: {line!r}\n{self.log_text()}")
        self.url = line.split("listening on ")[1].split()[0]
        self.client = MetaClient(self.url)

    def log_text(self):
        try:
            with open(os.path.join(self.dir, "serve.log")) as f:
                return f.read()
        except OSError:
            return ""

    def sanitizer_reports(self):
        out = []
        for name in sorted(os.listdir(self.dir)):
            if "san." in name:
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    txt = f.read()
                if txt.strip():
                    out.append(f"=== {name} ===\n{txt}")
        return out + H.valgrind_reports(self.dir)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(max(30, H.EXIT_WAIT))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        return self.proc.returncode
