"""hub.push against a local HTTP server that answers the Hub endpoints huggingface_hub calls for one commit."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import OpsynthError
from pipeline.outputs import hub

TOKEN = "hf_TESTsecretTOKENvalue123"


class FakeHub:
    """create repo, create branch, validate-yaml, preupload (everything 'regular'), commit."""

    def __init__(self) -> None:
        self.repos: dict[str, dict] = {}  # repo_id -> {"private", "branches": {name: {path: bytes}}}
        self.requests: list[tuple[str, str]] = []
        self.fail: dict[str, int] = {}  # path fragment -> how many 503s to answer first
        self.commits: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.requests.append(("GET", self.path))
                self._send(404, {"error": "not here"})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                path = self.path.split("?")[0]
                fake.requests.append(("POST", path))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._send(401, {"error": "Invalid credentials"})
                for frag, left in fake.fail.items():
                    if frag in path and left > 0:
                        fake.fail[frag] = left - 1
                        return self._send(503, {"error": "Service Unavailable"})
                if path == "/api/repos/create":
                    req = json.loads(body)
                    rid = f"{req['organization']}/{req['name']}"
                    if rid in fake.repos:
                        return self._send(409, {"error": "You already created this dataset repo",
                                                "url": f"{fake.url}/datasets/{rid}"})
                    fake.repos[rid] = {"private": req.get("visibility") == "private", "branches": {"main": {}}}
                    return self._send(200, {"url": f"{fake.url}/datasets/{rid}"})
                if path == "/api/validate-yaml":
                    front = json.loads(body)["content"].split("---")[1]
                    if "license:" not in front:  # the real Hub checks much more; one rule stands in for it
                        return self._send(400, {"errors": [{"message": "license is required"}]})
                    return self._send(200, {"errors": [], "warnings": []})
                m = re.match(r"^/api/datasets/([^/]+/[^/]+)/(preupload|commit|branch)/(.+)$", path)
                if not m or m.group(1) not in fake.repos:
                    return self._send(404, {"error": "Repository not found"})
                rid, kind, rev = m.group(1), m.group(2), m.group(3)
                branches = fake.repos[rid]["branches"]
                if kind == "branch":
                    branches.setdefault(rev, dict(branches["main"]))
                    return self._send(200, {})
                if rev not in branches:
                    return self._send(404, {"error": "Revision not found"})
                if kind == "preupload":
                    files = json.loads(body)["files"]
                    return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                       "shouldIgnore": False} for f in files]})
                lines = [json.loads(x) for x in body.splitlines() if x.strip()]
                added = {ln["value"]["path"]: base64.b64decode(ln["value"]["content"])
                         for ln in lines if ln["key"] == "file"}
                branches[rev].update(added)
                oid = hashlib.sha1(repr(sorted(added)).encode()).hexdigest()
                fake.commits.append({"repo": rid, "revision": rev, "files": added,
                                     "summary": lines[0]["value"]["summary"]})
                return self._send(200, {"commitUrl": f"{fake.url}/datasets/{rid}/commit/{oid}", "commitOid": oid})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_hub(monkeypatch):
    monkeypatch.setattr(hub, "RETRY_BASE_S", 0.01)
    h = FakeHub()
    yield h
    h.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "ds"
    (d / "data").mkdir(parents=True)
    (d / "plots").mkdir()
    pq.write_table(pa.table({"ops": ['["nn.ReLU"]'] * 3, "data_source": ["torch#1"] * 3, "code": ["x"] * 3}),
                   d / "data" / "train-00000-of-00001.parquet")
    (d / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n\n`load_dataset(\"ORG/NAME\")`\n")
    (d / "plots" / "runtime.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    (d / ".partial").write_text("hidden files are not uploaded")
    return d


def test_push_creates_repo_and_uploads_in_one_commit(fake_hub: FakeHub, folder: Path, monkeypatch, capsys, caplog):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    caplog.set_level(logging.DEBUG)
    url = hub.push(folder, "my-org/ops", private=True, endpoint=fake_hub.url, token=TOKEN)
    assert url.startswith(f"{fake_hub.url}/datasets/my-org/ops/commit/")
    assert fake_hub.repos["my-org/ops"]["private"] is True
    assert len(fake_hub.commits) == 1
    files = fake_hub.commits[0]["files"]
    assert sorted(files) == ["README.md", "data/train-00000-of-00001.parquet", "plots/runtime.png"]
    assert files["plots/runtime.png"] == (folder / "plots" / "runtime.png").read_bytes()
    assert b'load_dataset("my-org/ops")' in files["README.md"]  # placeholder replaced in the upload only
    assert "ORG/NAME" in (folder / "README.md").read_text()
    assert fake_hub.commits[0]["summary"] == "opsynth: publish 3 tasks"
    seen = capsys.readouterr()
    for text in [url, seen.out, seen.err, caplog.text] + [p.read_text(errors="ignore")
                                                       for p in folder.parent.rglob("*") if p.is_file()]:
        assert TOKEN not in text


def test_existing_repo_branch_and_token_from_env(fake_hub: FakeHub, folder: Path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.push(folder, "my-org/ops", endpoint=fake_hub.url)
    hub.push(folder, "my-org/ops", revision="v2", endpoint=fake_hub.url)  # repo exists: 409 is fine
    assert [c["revision"] for c in fake_hub.commits] == ["main", "v2"]
    assert "/api/datasets/my-org/ops/branch/v2" in [p for _, p in fake_hub.requests]


def test_transient_503_is_retried(fake_hub: FakeHub, folder: Path):
    fake_hub.fail = {"/commit/": 1, "/repos/create": 1}
    url = hub.push(folder, "my-org/ops", endpoint=fake_hub.url, token=TOKEN)
    commits = [p for m, p in fake_hub.requests if "/commit/" in p]
    assert len(commits) == 2 and len(fake_hub.commits) == 1 and "/commit/" in url


def test_persistent_outage_is_one_line(fake_hub: FakeHub, folder: Path):
    fake_hub.fail = {"/commit/": 100}
    with pytest.raises(OpsynthError, match=r"failed \(HTTP 503\)") as e:
        hub.push(folder, "my-org/ops", endpoint=fake_hub.url, token=TOKEN)
    assert "\n" not in str(e.value) and not fake_hub.commits
    assert sum("/commit/" in p for _, p in fake_hub.requests) == hub.MAX_ATTEMPTS


def test_wrong_token_and_no_token(fake_hub: FakeHub, folder: Path, monkeypatch):
    with pytest.raises(OpsynthError, match="HTTP 401") as e:
        hub.push(folder, "my-org/ops", endpoint=fake_hub.url, token="hf_wrong_value")
    assert "hf_wrong_value" not in str(e.value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(folder.parent / "empty-hf-home"))
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    with pytest.raises(OpsynthError, match="no Hugging Face token"):
        hub.push(folder, "my-org/ops", endpoint=fake_hub.url)


def test_dry_run_lists_files_without_network(folder: Path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    text = hub.push(folder, "my-org/ops", dry_run=True, endpoint="http://127.0.0.1:9")
    lines = text.splitlines()
    assert lines[0].startswith("dry run: would upload 3 files") and "datasets/my-org/ops@main" in lines[0]
    assert [ln.split()[0] for ln in lines[1:]] == ["README.md", "data/train-00000-of-00001.parquet",
                                                  "plots/runtime.png"]


@pytest.mark.parametrize("bad", ["noslash", "a/b/c", "/name", "org/", "org/na me", "org/-x", "o..rg/x"])
def test_bad_repo_id(bad: str, folder: Path):
    with pytest.raises(OpsynthError, match="not ORG/NAME"):
        hub.push(folder, bad, dry_run=True)


def test_not_a_dataset_folder(tmp_path: Path):
    with pytest.raises(OpsynthError, match="not a published dataset folder"):
        hub.push(tmp_path, "my-org/ops", dry_run=True)


def test_changed_folder_is_refused(folder: Path):
    import hashlib

    png = folder / "plots" / "runtime.png"
    files = {"plots/runtime.png": {"sha256": hashlib.sha256(png.read_bytes()).hexdigest()}}
    (folder / "manifest.json").write_text(json.dumps({"files": files}))
    assert "manifest.json" in hub.push(folder, "my-org/ops", dry_run=True)
    png.write_bytes(b"truncated")
    with pytest.raises(OpsynthError, match="changed since it was published"):
        hub.push(folder, "my-org/ops", dry_run=True)


def test_card_metadata_rejected_is_one_line(fake_hub: FakeHub, folder: Path):
    (folder / "README.md").write_text("---\npretty_name: x\n---\nno license\n")
    with pytest.raises(OpsynthError, match="rejected the card's metadata.*license is required") as e:
        hub.push(folder, "my-org/ops", endpoint=fake_hub.url, token=TOKEN)
    assert "\n" not in str(e.value) and not fake_hub.commits


def test_a_release_uploads_what_publish_wrote_and_keeps_its_run_directory_local(folder: Path, monkeypatch):
    import hashlib
    import json

    monkeypatch.delenv("HF_TOKEN", raising=False)
    (folder / "run" / "tasks").mkdir(parents=True)
    (folder / "run" / "tasks" / "part-00000.parquet").write_bytes(b"run state")
    published = ["data/train-00000-of-00001.parquet", "plots/runtime.png"]
    files = {rel: {"bytes": (folder / rel).stat().st_size, "sha256": hashlib.sha256((folder / rel).read_bytes()).hexdigest()}
             for rel in published}
    (folder / "manifest.json").write_text(json.dumps({"files": files}))
    lines = hub.push(folder, "my-org/ops", dry_run=True, endpoint="http://127.0.0.1:9").splitlines()
    assert [ln.split()[0] for ln in lines[1:]] == ["README.md", *published[:1], "manifest.json", published[1]]
    assert not any("run/" in ln for ln in lines)
