"""What X programs used to redo at every desktop start is done once when the image is built
(images/desktop/x_caches.py): Xvfb gets its compiled keymap from the image, and openbox its compose
table from libX11's system cache (each was ~0.7 s of a VM's cold boot under TCG); Xvfb no longer
rereads its protocol-name registry for every extension."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import docker
import pytest

from cubicle.orchestrator.sandbox import Sandbox

pytestmark = [pytest.mark.docker]

COMPOSE_CACHE = "/var/cache/libx11/compose/"

# Run as root in a throw-away container of the image (its root file system is writable there, not
# in a sandbox): the keyboard mapping of an Xvfb started with the real compiler moved away (only
# the image's keymap can give it one), of an Xvfb started with the image's keymap moved away
# (the real compiler makes it), and what /usr/bin/xkbcomp makes of another keymap's source
# (German) given in the X server's call, decompiled by the real compiler.
KEYMAPS = r"""
import json, os, subprocess
from Xlib import display

def mapping_of_a_new_server(number):
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", f":{number}", "-nolisten", "tcp", "-displayfd", str(write_fd)],
        pass_fds=(write_fd,), stderr=subprocess.PIPE,
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reported:
        said = reported.readline()
    if not said.strip():
        return {"error": server.communicate(timeout=30)[1].decode()[-2000:]}
    dpy = display.Display(f":{number}")
    first, last = dpy.display.info.min_keycode, dpy.display.info.max_keycode
    rows = [list(row) for row in dpy.get_keyboard_mapping(first, last - first + 1)]
    dpy.close()
    server.terminate()
    server.communicate(timeout=30)
    return {"first": first, "rows": rows}

os.rename("/usr/bin/xkbcomp.real", "/usr/bin/xkbcomp.hidden")
cached = mapping_of_a_new_server(4)
os.rename("/usr/bin/xkbcomp.hidden", "/usr/bin/xkbcomp.real")
os.rename("/usr/share/cubicle/xkb/keymap.xkm", "/usr/share/cubicle/xkb/hidden.xkm")
compiled = mapping_of_a_new_server(5)
os.rename("/usr/share/cubicle/xkb/hidden.xkm", "/usr/share/cubicle/xkb/keymap.xkm")
with open("/usr/share/cubicle/xkb/keymap.args") as f:
    args = f.read().splitlines()
with open("/usr/share/cubicle/xkb/keymap.xkb") as f:
    german = f.read().replace("pc+us+inet", "pc+de+inet")
made = subprocess.run(["/usr/bin/xkbcomp", *args, "/tmp/de.xkm"], input=german.encode())
subprocess.run(["/usr/bin/xkbcomp.real", "-xkb", "/tmp/de.xkm", "/tmp/de.txt"], check=True)
with open("/tmp/de.txt") as f:
    text = f.read()
print(json.dumps({"cached": cached, "compiled": compiled, "made": made.returncode, "de": text}))
"""


@pytest.fixture
def engine() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    try:
        yield client
    finally:
        client.close()


def test_xvfb_takes_its_keymap_from_the_image_and_any_other_is_compiled(
    engine: docker.DockerClient, docker_image: str
) -> None:
    container = engine.containers.run(
        docker_image,
        ["/opt/cubicle/venv/bin/python", "-c", KEYMAPS],
        entrypoint=[],
        user="0:0",
        detach=True,
        network_mode="none",
        labels={"cubicle.test": f"x-caches-{os.getpid()}"},
    )
    try:
        status = container.wait(timeout=120)
        output = bytes(container.logs(stdout=True, stderr=False)).decode()
        errors = bytes(container.logs(stdout=False, stderr=True)).decode()
    finally:
        container.remove(force=True)
    assert status["StatusCode"] == 0, errors
    found = json.loads(output)
    cached, compiled = found["cached"], found["compiled"]
    assert "error" not in cached, f"Xvfb did not start without the real compiler: {cached}"
    assert "error" not in compiled, compiled
    assert cached == compiled  # the same keyboard, keycode by keycode
    a_key = cached["rows"][38 - cached["first"]]
    assert a_key[:2] == [ord("a"), ord("A")], a_key  # US: <AC01> types a
    assert found["made"] == 0
    german_y_key = found["de"].split("key <AD06> {", 1)[1].split("};", 1)[0]
    assert "[               z,               Z" in german_y_key, german_y_key


def test_openbox_reads_its_compose_table_from_the_system_cache(docker_image: str) -> None:
    with Sandbox.create("docker") as sandbox:
        found = sandbox.exec(["pgrep", "-x", "-u", "cubicle", "openbox"])
        assert found.exit_code == 0, found
        pid = found.stdout.split()[0]
        maps = sandbox.exec(["cat", f"/proc/{pid}/maps"])
        assert maps.exit_code == 0, maps
    # libX11 maps the cache file it loads (a table parsed from the Compose file is not mapped)
    mapped = {line.split()[-1] for line in maps.stdout.splitlines() if COMPOSE_CACHE in line}
    assert len(mapped) == 1, maps.stdout


def test_the_x_server_has_no_protocol_name_registry_to_reread(docker_image: str) -> None:
    with Sandbox.create("docker") as sandbox:
        registry = sandbox.exec(["ls", "/usr/lib/xorg/"])
    assert registry.exit_code == 0, registry
    assert registry.stdout.split().count("protocol.txt") == 0, registry.stdout
    assert "protocol.txt.unused" in registry.stdout.split()  # diverted, so upgrades keep it away
