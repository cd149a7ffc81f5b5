"""Push a published dataset folder to the Hugging Face Hub in one commit.

The repository is created when missing; transient failures (5xx, 429, dropped connections) are
retried with exponential backoff. The token comes from the `token` argument, then $HF_TOKEN, then the
`hf auth login` store; it is passed to the client only and never printed, logged or written.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pipeline.errors import OpsynthError

REPO_ID = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94})/[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94})$")
MAX_ATTEMPTS = 5
RETRY_BASE_S = 2.0  # waits 2, 4, 8, 16 s: rides out a Hub blip without hammering it
T = TypeVar("T")


def validate_repo_id(repo_id: str) -> str:
    if not isinstance(repo_id, str) or not REPO_ID.match(repo_id) or ".." in repo_id or "--" in repo_id:
        raise OpsynthError(f"repo id {repo_id!r} is not ORG/NAME (letters, digits, '-', '_', '.'); "
                           "pass e.g. --repo-id my-org/opsynth-ops")
    return repo_id


def files_to_upload(folder: Path) -> list[tuple[str, Path]]:
    """(path in repo, local path) for every file publish wrote (the manifest's `files`, its README.md and
    manifest.json), sorted; a folder without that list: every file, hidden ones left out. Anything else there,
    such as the run directory a release keeps beside what it publishes (run/), stays local."""
    import json

    folder = Path(folder)
    if not (folder / "README.md").is_file() or not list((folder / "data").glob("*.parquet")):
        raise OpsynthError(f"{folder} is not a published dataset folder (no README.md or data/*.parquet); "
                           "run `opsynth publish RUN_DIR --to FOLDER` first")
    _check_manifest(folder)
    manifest = folder / "manifest.json"
    listed = json.loads(manifest.read_text()).get("files") if manifest.is_file() else None
    if listed:
        return sorted((rel, folder / rel) for rel in {*listed, "README.md", "manifest.json"})
    out = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            out.append((rel.as_posix(), p))
    return out


def _check_manifest(folder: Path) -> None:
    """Refuse a folder whose files no longer match the hashes publish recorded (edited or half-copied)."""
    import hashlib
    import json

    path = folder / "manifest.json"
    if not path.is_file():
        return
    for rel, info in json.loads(path.read_text()).get("files", {}).items():
        p = folder / rel
        if not p.is_file() or hashlib.sha256(p.read_bytes()).hexdigest() != info["sha256"]:
            raise OpsynthError(f"{p} is missing or changed since it was published; "
                               "run `opsynth publish` again to rebuild the folder")


def resolve_token(token: str | None) -> str:
    if token:
        return token
    env = os.environ.get("HF_TOKEN")
    if env:
        return env
    from huggingface_hub import get_token

    found = get_token()
    if not found:
        raise OpsynthError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (a write token is needed)")
    return found


def _is_transient(e: BaseException) -> bool:
    from huggingface_hub.errors import HfHubHTTPError

    try:  # the HTTP client's network errors, whatever client this huggingface_hub version uses
        from huggingface_hub.utils._http import _DEFAULT_RETRY_ON_EXCEPTIONS as network_errors
    except ImportError:
        network_errors = ()
    if isinstance(e, HfHubHTTPError) and e.response is not None:
        return e.response.status_code >= 500 or e.response.status_code == 429
    return isinstance(e, (ConnectionError, TimeoutError, *network_errors))


def _retry(what: str, fn: Callable[[], T]) -> T:
    from huggingface_hub.errors import HfHubHTTPError

    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - sorted into transient (retry) and final (one line)
            if _is_transient(e) and attempt < MAX_ATTEMPTS:
                time.sleep(RETRY_BASE_S * 2 ** (attempt - 1))
                continue
            if isinstance(e, HfHubHTTPError) and e.response is not None:
                code = e.response.status_code
                hint = {401: "the token is invalid or expired", 403: "the token cannot write to this repository",
                        404: "the repository or revision does not exist"}.get(code, "the Hub refused the request")
                raise OpsynthError(f"{what} failed (HTTP {code}): {hint}") from None
            if isinstance(e, ValueError) and "README.md" in str(e):  # the Hub's card metadata check
                raise OpsynthError(f"{what} failed: the Hub rejected the card's metadata "
                                   f"({' '.join(str(e).split())[:300]}); fix README.md and push again") from None
            if _is_transient(e):
                raise OpsynthError(f"{what} failed after {MAX_ATTEMPTS} attempts ({type(e).__name__}); "
                                   "check the network or the Hub status and push again") from None
            raise
    raise AssertionError("unreachable")


def _listing(files: list[tuple[str, Path]], repo_id: str, revision: str | None, private: bool) -> str:
    total = sum(p.stat().st_size for _, p in files)
    head = (f"dry run: would upload {len(files)} files ({total / 1e6:.2f} MB) to datasets/{repo_id}"
            f"@{revision or 'main'} ({'private' if private else 'public'}) in one commit:")
    width = max(len(rel) for rel, _ in files)
    return "\n".join([head] + [f"  {rel:<{width}}  {p.stat().st_size:>12,} B" for rel, p in files])


def _operations(files: list[tuple[str, Path]], repo_id: str) -> list[Any]:
    from huggingface_hub import CommitOperationAdd

    from pipeline.outputs.card import REPO_PLACEHOLDER

    ops = []
    for rel, p in files:
        if rel == "README.md":  # usage snippets name the real repository in the uploaded card
            data: Any = p.read_text().replace(REPO_PLACEHOLDER, repo_id).encode()
        else:
            data = str(p)
        ops.append(CommitOperationAdd(path_in_repo=rel, path_or_fileobj=data))
    return ops


def push(folder: Path, repo_id: str, private: bool = False, revision: str | None = None, dry_run: bool = False,
         endpoint: str | None = None, token: str | None = None) -> str:
    """Upload `folder` to the dataset repo `repo_id` in one commit; returns the commit URL (or the dry-run listing)."""
    validate_repo_id(repo_id)
    files = files_to_upload(Path(folder))
    if dry_run:
        return _listing(files, repo_id, revision, private)
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=resolve_token(token))
    _retry(f"creating dataset repo {repo_id}",
           lambda: api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True))
    if revision:
        _retry(f"creating branch {revision} of {repo_id}",
               lambda: api.create_branch(repo_id, branch=revision, repo_type="dataset", exist_ok=True))
    n_rows = _rows_in(folder)
    info = _retry(f"committing {len(files)} files to {repo_id}",
                  lambda: api.create_commit(repo_id, repo_type="dataset", revision=revision,
                                            operations=_operations(files, repo_id),  # fresh per attempt
                                            commit_message=f"opsynth: publish {n_rows} tasks"))
    return info.commit_url


def _rows_in(folder: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in sorted(Path(folder).glob("data/*.parquet")))
