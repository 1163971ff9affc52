import RFB from "/novnc/core/rfb.js";

const H = { "Content-Type": "application/json", "X-Cubicle-View": "1" };
const $ = (id) => document.getElementById(id);
const page = { mode: null, rfb: null, connected: false };
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

enter().catch((e) => status(String(e)));
