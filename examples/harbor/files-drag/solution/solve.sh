#!/bin/bash
# solution/solve.sh of the cubicle task files-drag, written by scripts/harbor-export from its
# task file (do not edit: run scripts/harbor-export again).
set -euo pipefail
exec python3 - <<'PYTHON'
import json
SETUP = json.loads("{\"workdir\": \"~/task\", \"port\": null}")
CHECKS = json.loads("[{\"kind\": \"equals\", \"name\": \"the report in the archive folder, unchanged\", \"path\": \"{WORKDIR}/archive/report.txt\", \"text\": \"Q3 report: 1,284 units shipped.\\n\"}, {\"kind\": \"gone\", \"path\": \"~/task/report.txt\", \"name\": \"verifier cubicle.orchestrator.modelrun.verifiers:report_moved_away\"}]")
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


for check in CHECKS:
    kind = check["kind"]
    if kind in ("equals", "contains"):
        target = pathlib.Path(path(check["path"]))
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.chmod(target.stat().st_mode | 0o200)
        target.write_text(check["text"], encoding="utf-8")
    elif kind == "form":
        request = urllib.request.Request(
            "http://127.0.0.1:" + PORT + "/submit",
            data=json.dumps(check["fields"]).encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            reply.read()
    elif kind == "count_q_lines":
        words = read("words.txt")
        count = sum(1 for line in words.splitlines() if "q" in line)
        pathlib.Path(path("count.txt")).write_text(str(count) + "\n", encoding="utf-8")
    elif kind == "gone":
        if os.path.lexists(path(check["path"])):
            os.remove(path(check["path"]))
    else:
        sys.exit("unknown check kind " + kind)
    print("done    " + check["name"])
PYTHON
