"use strict";
const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
history.replaceState(null, "", location.pathname);
const auth = {"Authorization": "Bearer " + token};
let current = null, abort = null, shotUrl = null;

async function api(path, opts) {
  const r = await fetch(path, Object.assign({headers: Object.assign({"Content-Type": "application/json"}, auth)}, opts || {}));
  if (!r.ok) throw new Error((await r.json()).error.message);
  return r.status === 202 ? null : r.json();
}
async function loadSessions() {
  const list = await api("/v1/agents/sessions?limit=100");
  const box = document.getElementById("sessions");
  box.textContent = "";
  for (const s of list.data) {
    const div = document.createElement("div");
    div.className = "session" + (s.id === current ? " sel" : "");
    div.dataset.id = s.id;
    div.textContent = s.id + " — " + s.agent.model + " — " + s.status;
    div.onclick = () => select(s.id);
    box.appendChild(div);
  }
}
function showActions(session) {
  const box = document.getElementById("actions");
  const kept = {};  // a sign-in form being filled in survives a refresh of the list
  for (const el of box.querySelectorAll(".signin")) kept[el.dataset.request] = el;
  box.textContent = "";
  document.getElementById("status").textContent = session.id + ": " + session.status;
  for (const a of session.required_actions || []) {
    if (a.type === "function_call") {
      box.appendChild(functionCall(session.id, a));
      continue;
    }
    if ((a.request || {}).type === "browser_authentication") {
      box.appendChild(kept[a.request_id] || signIn(session.id, a));
      continue;
    }
    const div = document.createElement("div");
    div.className = "action";
    const req = a.request || {};
    const what = req.type === "safety_check"
      ? (req.checks || []).map(c => "[" + c.code + "] " + c.message).join("; ")
      : (req.origin || req.type);
    div.textContent = "Approval needed (" + req.type + "): " + what + " ";
    for (const decision of ["approve", "deny"]) {
      const b = document.createElement("button");
      b.textContent = decision;
      b.dataset.decision = decision;
      b.onclick = () => api("/v1/agents/sessions/" + session.id + "/events", {method: "POST",
        body: JSON.stringify({events: [{type: "agent.session.input.computer_use_approval_request_result",
          request_id: a.request_id, response: {type: req.type, decision: decision}}]})})
        .then(() => div.remove(), e => alert(e));
      div.appendChild(b);
    }
    box.appendChild(div);
  }
}
function signIn(sessionId, a) {
  // a browser sign-in: the destination, the methods, a masked input per field; the values go
  // only into the answer, and the form is emptied and removed once it is sent
  const req = a.request;
  const div = document.createElement("div");
  div.className = "action signin";
  div.dataset.request = a.request_id;
  const head = document.createElement("div");
  head.textContent = (req.reason || "Sign in") + " — credentials go to " +
    (req.credential_origin || "an unknown origin: cancel unless you can verify it");
  div.appendChild(head);
  let choice = null;
  if (req.options && req.options.length) {
    choice = document.createElement("select");
    for (const o of req.options) {
      const opt = document.createElement("option");
      opt.value = o.id;
      opt.textContent = o.label;
      choice.appendChild(opt);
    }
    div.appendChild(choice);
  }
  const inputs = [];
  for (const f of req.fields || []) {
    const label = document.createElement("label");
    label.textContent = f.label + (f.required ? "" : " (optional)") + " ";
    const input = document.createElement("input");
    input.type = "password";
    input.autocomplete = "off";
    input.dataset.field = f.id;
    label.appendChild(input);
    div.appendChild(label);
    inputs.push([f.id, input]);
  }
  const send = (response) => api("/v1/agents/sessions/" + sessionId + "/events", {method: "POST",
    body: JSON.stringify({events: [{type: "agent.session.input.computer_use_approval_request_result",
      request_id: a.request_id, response: response}]})});
  const clear = () => { for (const [, input] of inputs) input.value = ""; div.remove(); };
  const submit = document.createElement("button");
  submit.textContent = "sign in";
  submit.onclick = () => {
    const option = choice ? choice.value : null;
    const allowed = option ? req.options.find(o => o.id === option).field_ids : null;
    const fields = inputs
      .filter(([id, input]) => input.value && (!allowed || allowed.includes(id)))
      .map(([id, input]) => ({field_id: id, value: input.value}));
    const response = {type: "browser_authentication", action: "submit", fields: fields};
    if (option) response.selected_option = option;
    send(response).then(clear, e => alert(e));
  };
  const cancel = document.createElement("button");
  cancel.textContent = "cancel";
  cancel.onclick = () => send({type: "browser_authentication", action: "cancel"})
    .then(clear, e => alert(e));
  div.appendChild(submit);
  div.appendChild(cancel);
  return div;
}
function functionCall(sessionId, a) {
  // a pending function tool call: its arguments, and a text answer (or a refusal) as tool_result
  const div = document.createElement("div");
  div.className = "action";
  div.textContent = "Function call " + a.name + ": " + JSON.stringify(a.arguments) + " ";
  const input = document.createElement("input");
  input.placeholder = "answer";
  div.appendChild(input);
  for (const success of [true, false]) {
    const b = document.createElement("button");
    b.textContent = success ? "answer" : "decline";
    b.onclick = () => {
      const result = {type: "agent.session.input.tool_result", turn_id: a.turn_id,
        call_id: a.call_id, success: success};
      if (success) result.output = input.value; else result.error = "declined in the console";
      api("/v1/agents/sessions/" + sessionId + "/events", {method: "POST",
        body: JSON.stringify({events: [result]})}).then(() => div.remove(), e => alert(e));
    };
    div.appendChild(b);
  }
  return div;
}
async function refreshShot(id) {
  const r = await fetch("/console/api/sessions/" + id + "/screenshot", {headers: auth});
  if (!r.ok) return;
  const url = URL.createObjectURL(await r.blob());
  document.getElementById("shot").src = url;
  if (shotUrl) URL.revokeObjectURL(shotUrl);
  shotUrl = url;
}
function addEvent(ev) {
  const box = document.getElementById("events");
  const line = document.createElement("div");
  line.className = "event";
  let detail = ev.item ? " " + ev.item.type + (ev.item.title ? " " + ev.item.title : "") + " " + (ev.item.status || "") : "";
  if (ev.text) detail += " " + ev.text;
  line.textContent = new Date().toLocaleTimeString() + " " + ev.type + detail;
  box.appendChild(line);
  box.scrollTop = box.scrollHeight;
  if (ev.session) { showActions(ev.session); loadSessions(); }
  if (ev.type === "agent.session.turn.item.done" && ev.item.output) refreshShot(current);
}
async function select(id) {
  if (abort) abort.abort();
  current = id;
  document.getElementById("view").disabled = false;
  document.getElementById("viewlink").textContent = "";
  document.getElementById("events").textContent = "";
  showActions(await api("/v1/agents/sessions/" + id));
  refreshShot(id);
  loadSessions();
  abort = new AbortController();
  const r = await fetch("/console/api/sessions/" + id + "/events", {headers: auth, signal: abort.signal});
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += value.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut); buf = buf.slice(cut + 2);
      const data = block.split("\n").filter(l => l.startsWith("data:")).map(l => l.slice(5).trim()).join("\n");
      if (data) addEvent(JSON.parse(data));
    }
  }
}
document.getElementById("refresh").onclick = loadSessions;
document.getElementById("view").onclick = async () => {
  const link = document.getElementById("viewlink");
  try {
    const r = await api("/console/api/sessions/" + current + "/view", {method: "POST"});
    link.href = r.url; link.textContent = "open the live view (" + r.mode + ")";
  } catch (e) { link.removeAttribute("href"); link.textContent = String(e.message || e); }
};
loadSessions();
setInterval(loadSessions, 5000);
