import RFB from "/novnc/core/rfb.js";

const H = { "Content-Type": "application/json", "X-Cubicle-View": "1" };
const $ = (id) => document.getElementById(id);
const page = { mode: null, rfb: null, connected: false, pasted: 0 };
window.cubicleView = page;

function status(text) { $("status").textContent = text; page.status = text; }

async function enter() {
  // the one-time token travels in the fragment (never sent to a server); drop it at once
  const token = new URLSearchParams(location.hash.slice(1)).get("t");
  history.replaceState(null, "", "/");
  const reply = token
    ? await fetch("/api/session", { method: "POST", headers: H, body: JSON.stringify({ token }) })
    : await fetch("/api/state", { headers: H });
  const body = await reply.json();
  if (!reply.ok) { status(body.error || "not authorized"); page.refused = true; return; }
  $("sandbox").textContent = body.sandbox;
  show(body.mode);
  connect();
}

function show(mode) {
  page.mode = mode;
  $("mode").textContent = mode === "takeover" ? "YOU HAVE CONTROL (agent paused)" : "view only";
  $("mode").className = mode;
  $("toggle").textContent = mode === "takeover" ? "Give control back" : "Take control";
  $("toggle").hidden = false;
}

function connect() {
  const rfb = new RFB($("screen"), `ws://${location.host}/websockify`, { wsProtocols: ["binary"] });
  rfb.viewOnly = page.mode !== "takeover";
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => { page.connected = true; status("connected"); });
  rfb.addEventListener("disconnect", async () => {
    page.connected = false;
    page.rfb = null;
    status("reconnecting…");
    const reply = await fetch("/api/state", { headers: H });
    if (!reply.ok) { status("the view has ended"); return; }
    show((await reply.json()).mode);
    setTimeout(connect, 200);
  });
  page.rfb = rfb;
}

$("toggle").addEventListener("click", async () => {
  const mode = page.mode === "takeover" ? "view" : "takeover";
  const reply = await fetch("/api/mode", { method: "POST", headers: H, body: JSON.stringify({ mode }) });
  if (reply.ok) show((await reply.json()).mode);
});

// Paste (takeover only): the browser's paste event carries the person's text (any Unicode), which
// the server makes the guest's clipboard before pressing the same chord there. noVNC must not
// see Ctrl+V (it would stop the event, so the browser would not paste, and press V in the guest).
let chord = "ctrl+v";
window.addEventListener("keydown", (e) => {
  if (page.mode !== "takeover" || !(e.ctrlKey || e.metaKey) || e.altKey || e.code !== "KeyV") return;
  chord = e.shiftKey ? "ctrl+shift+v" : "ctrl+v";
  e.stopImmediatePropagation(); // not preventDefault: the browser's paste follows
}, true);

document.addEventListener("paste", async (e) => {
  if (page.mode !== "takeover") return; // view only: nothing leaves the browser
  e.preventDefault();
  const text = e.clipboardData ? e.clipboardData.getData("text/plain") : "";
  const keys = chord;
  chord = "ctrl+v";
  if (!text) { status("nothing to paste: the clipboard holds no text"); return; }
  status("pasting…");
  const reply = await fetch(`/api/paste?keys=${encodeURIComponent(keys)}`, {
    method: "POST",
    headers: { "Content-Type": "text/plain;charset=utf-8", "X-Cubicle-View": "1" },
    body: text,
  });
  const body = await reply.json().catch(() => ({}));
  if (reply.ok) {
    page.pasted += 1;
    status(`pasted ${body.pasted} characters`);
  } else {
    page.pasteError = body.error || `paste refused (${reply.status})`;
    status(page.pasteError);
  }
}, true);

enter().catch((e) => status(String(e)));
