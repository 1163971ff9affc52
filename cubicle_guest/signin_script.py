"""The script :mod:`cubicle_guest.signin` runs in an isolated world of each frame.

Evaluated, :data:`SCRIPT` is ``{detect, fill}``:

- ``detect()`` → ``{title, groups: [{label, fields: [{kind, label, type, required}]}]}``: every
  sign-in group of the document, in document order. A field's ``kind`` comes from its input type
  and ``autocomplete`` tokens first (``password``, ``current-password``/``new-password``,
  ``one-time-code``, ``email``, ``username``), then from words of its label, name and id; a group
  (its ``<form>``, else the nearest ancestor holding a submit button) counts when it has a password
  or code field, or a submit button that reads like sign-in ("Sign in", "Next", "Continue"...).
- ``fill(index, expected, entries)`` → ``{filled, submitted}`` or ``{error: "changed"}``: writes
  each ``[position, value]`` into group ``index`` (only when that group still describes as
  ``expected``, JSON) with ``input`` and ``change`` events, then submits its form
  (``requestSubmit``: the page's validation and submit handlers run) or clicks its submit button.

Values arrive as call arguments (``Runtime.callFunctionOn``), never inside this source; nothing
here keeps or prints them. The page's own scripts cannot replace the functions used here: an
isolated world has its own globals and prototypes.
"""

from typing import Final

__all__ = ["SCRIPT"]

SCRIPT: Final = r"""
(() => {
  const PASSWORD = /^(current-password|new-password)$/;
  const CODE_WORDS =
    /(one[- ]?time|verification|security code|otp|2fa|two[- ]factor|passcode|\bcode\b)/i;
  const USER_WORDS = /(user ?name|login|e-?mail|account|identifier)/i;
  const SUBMIT_WORDS = /(sign|log)[ -]?in|next|continue|verify|submit|connexion|anmelden/i;
  const TEXTLIKE = new Set(["text", "email", "tel", "number", "password", ""]);

  const visible = (el) => {
    if (el.disabled || el.readOnly) return false;
    const box = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    return box.width > 0 && box.height > 0 && style.visibility !== "hidden" &&
      style.display !== "none";
  };
  const clean = (text) => (text || "").replace(/\s+/g, " ").trim().slice(0, 120);
  const labelOf = (el) => {
    if (el.labels && el.labels.length) {
      const text = clean(el.labels[0].innerText || el.labels[0].textContent);
      if (text) return text;
    }
    const by = el.getAttribute("aria-labelledby");
    if (by) {
      const text = clean(by.split(/\s+/).map((id) => {
        const node = document.getElementById(id);
        return node ? node.textContent : "";
      }).join(" "));
      if (text) return text;
    }
    return clean(el.getAttribute("aria-label") || el.getAttribute("placeholder") ||
                 el.getAttribute("title") || el.name || el.id);
  };
  const kindOf = (el) => {
    const type = (el.getAttribute("type") || "text").toLowerCase();
    if (!TEXTLIKE.has(type)) return null;
    const tokens = (el.getAttribute("autocomplete") || "").toLowerCase().split(/\s+/);
    const words = [labelOf(el), el.name, el.id].join(" ");
    if (type === "password" || tokens.some((t) => PASSWORD.test(t))) return "password";
    if (tokens.includes("one-time-code")) return "code";
    if (type === "email" || tokens.includes("email")) return "email";
    if (tokens.includes("username")) return "username";
    if (CODE_WORDS.test(words)) return "code";
    if (USER_WORDS.test(words)) return "username";
    return null;
  };
  const submitterOf = (container) => {
    const buttons = [
      ...container.querySelectorAll("button, input[type=submit], input[type=button]"),
    ].filter(visible);
    return buttons.find((b) => b.type === "submit") ||
      buttons.find((b) => SUBMIT_WORDS.test(b.innerText || b.value || "")) || null;
  };
  const containerOf = (el) => {
    if (el.form) return el.form;
    for (let node = el.parentElement; node; node = node.parentElement) {
      if (submitterOf(node)) return node;
    }
    return document.body;
  };
  const groupLabel = (container, index) => {
    const legend = container.querySelector("legend, h1, h2, h3, h4");
    const submitter = submitterOf(container);
    return clean(container.getAttribute("aria-label") || (legend && legend.textContent) ||
                 (submitter && (submitter.innerText || submitter.value))) || `Method ${index + 1}`;
  };

  // Every sign-in group of this document, in document order: [{container, label, inputs, fields}].
  const groups = () => {
    const found = new Map();
    for (const el of document.querySelectorAll("input")) {
      if (!visible(el)) continue;
      const kind = kindOf(el);
      if (!kind) continue;
      const container = containerOf(el);
      if (!found.has(container)) found.set(container, []);
      found.get(container).push([el, kind]);
    }
    const result = [];
    for (const [container, entries] of found) {
      const kinds = entries.map(([, kind]) => kind);
      const strong = kinds.includes("password") || kinds.includes("code");
      const submitter = submitterOf(container);
      const asksSignIn =
        submitter && SUBMIT_WORDS.test(submitter.innerText || submitter.value || "");
      if (!strong && !asksSignIn) continue;
      result.push({
        container,
        label: groupLabel(container, result.length),
        inputs: entries.map(([el]) => el),
        fields: entries.map(([el, kind]) => ({
          kind,
          label: labelOf(el) || kind,
          type: kind === "password" ? "password" : kind === "email" ? "email" : "text",
          required: el.required || kind === "password" || kind === "code",
        })),
      });
    }
    return result;
  };
  const describe = (group) => ({ label: group.label, fields: group.fields });

  const detect = () => ({ title: clean(document.title), groups: groups().map(describe) });

  // Write entries [[position, value]] into group `index` (whose description must equal `expected`,
  // JSON) and submit it. Answers counts only.
  const fill = (index, expected, entries) => {
    const group = groups()[index];
    if (!group || JSON.stringify(describe(group)) !== expected) return { error: "changed" };
    for (const [position, value] of entries) {
      const el = group.inputs[position];
      el.focus();
      el.value = value;
      el.dispatchEvent(new Event("input", { bubbles: true }));
      el.dispatchEvent(new Event("change", { bubbles: true }));
    }
    const submitter = submitterOf(group.container);
    if (group.container instanceof HTMLFormElement) {
      const own = submitter && submitter.type === "submit" && submitter.form === group.container;
      group.container.requestSubmit(own ? submitter : undefined);
    } else if (submitter) {
      submitter.click();
    } else {
      return { filled: entries.length, submitted: false };
    }
    return { filled: entries.length, submitted: true };
  };
  return { detect, fill };
})()
"""
