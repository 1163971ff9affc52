#!/bin/bash
# tests/test.sh of the cubicle task save-dialog, written by scripts/harbor-export from its
# task file (do not edit: run scripts/harbor-export again).
set -euo pipefail
exec python3 - <<'PYTHON'
import json
SETUP = json.loads("{\"workdir\": \"~/task\", \"port\": null}")
CHECKS = json.loads("[{\"kind\": \"equals\", \"name\": \"the note saved over the old summary\", \"path\": \"{WORKDIR}/reports/summary.txt\", \"text\": \"Q3 total: 1,284 units\\n\"}]")
FORM_DATA = "~/.cubicle-task/form-data.json"
import json, os, pathlib, posixpath, sys, urllib.request
HOME = str(pathlib.Path.home())
WORKDIR = os.path.expanduser(SETUP["workdir"]).rstrip("/") or "/"
PORT = str(SETUP.get("port"))


def path(text):
    text = text.replace("{WORKDIR}", WORKDIR).replace("{HOME}", HOME).replace("{PORT}", PORT)
    text = os.path.expanduser(text)
    return posixpath.normpath(text if text.startswith("/") else posixpath.join(WORKDIR, text))


def read(name):
    try:
        return pathlib.Path(path(name)).read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return None


def count_q(words):
    return str(sum(1 for line in words.splitlines() if "q" in line))


results = []
for check in CHECKS:
    kind, name = check["kind"], check["name"]
    if kind == "equals":
        got = read(check["path"])
        ok = got == check["text"]
    elif kind == "contains":
        got = read(check["path"])
        ok = got is not None and check["text"] in got
    elif kind == "form":
        raw = read(FORM_DATA)
        try:
            got = json.loads(raw) if raw is not None else None
        except ValueError:
            got = raw
        ok = got == check["fields"]
    elif kind == "count_q_lines":
        words, got = read("words.txt"), read("count.txt")
        ok = words is not None and got is not None and got.strip() == count_q(words)
    elif kind == "gone":
        got = os.path.lexists(path(check["path"]))
        ok = not got
    else:
        ok, got = False, "unknown check kind " + kind
    results.append(ok)
    print(("ok      " if ok else "FAILED  ") + name + ("" if ok else ": got " + repr(got)[:300]))
os.makedirs("/logs/verifier", exist_ok=True)
pathlib.Path("/logs/verifier/reward.txt").write_text("1\n" if all(results) else "0\n")
PYTHON
