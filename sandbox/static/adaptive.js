// A small Adaptive Cards renderer for the sandbox's Teams view: TextBlock (Markdown subset),
// RichTextBlock, FactSet, ColumnSet, Container, ActionSet, Input.Text/Number/Toggle/ChoiceSet
// and the actions Action.Execute / Submit (buttons), OpenUrl (links), ShowCard (a toggle).
// No framework. A button carries its action's path in data-ac, which cardAction() resolves.
"use strict";

const AC = {
  esc(text) {
    return String(text ?? "").replace(/[&<>"']/g, (c) => (
      { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  },
  url(url) { return /^(https?:|mailto:)/i.test(url || "") ? url : null; },
  // Markdown as Teams renders it in a TextBlock: **bold**, _italic_, `code`, [text](url), lists.
  markdown(text) {
    // Teams' date functions: {{DATE(iso, SHORT)}} and {{TIME(iso)}}, in the reader's zone.
    const when = String(text ?? "").replace(/\{\{(DATE|TIME)\(([^,)]+)(?:,\s*\w+)?\)\}\}/g, (m, kind, iso) => {
      const date = new Date(iso.trim());
      if (Number.isNaN(date.getTime())) return m;
      return kind === "DATE" ? date.toLocaleDateString() : date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    });
    // A backslash escapes Markdown (ticketing\_close): hide the character from the rules.
    let out = AC.esc(when).replace(/\\([\\`*_\[\]()#+.!-])/g, (_m, c) => `\u0001${c.charCodeAt(0)}\u0001`);
    out = out.replace(/\[([^\]\n]+)\]\(([^)\s]+)\)/g, (m, label, href) => {
      const safe = AC.url(href.replace(/&amp;/g, "&"));
      return safe ? `<a href="${AC.esc(safe)}" target="_blank" rel="noopener">${label}</a>` : label;
    });
    out = out.replace(/^- /gm, "• ");
    out = out.replace(/\*\*([^*\n]+)\*\*/g, "<b>$1</b>");
    out = out.replace(/(^|\s)_([^_\n]+)_(?=$|\s|[.,;:!?])/g, "$1<i>$2</i>");
    out = out.replace(/`([^`\n]+)`/g, "<code>$1</code>");
    out = out.replace(/\u0001(\d+)\u0001/g, (_m, code) => String.fromCharCode(Number(code)));
    return out.replace(/\n/g, "<br>");
  },
  textClass(el) {
    const c = ["ac-text"];
    if (el.weight === "Bolder") c.push("bolder");
    if (el.isSubtle) c.push("subtle");
    if (el.size) c.push(String(el.size).toLowerCase());
    if (el.color) c.push(String(el.color).toLowerCase());
    return c.join(" ");
  },
  element(el, path) {
    switch (el.type) {
      case "TextBlock":
        return `<div class="${AC.textClass(el)}">${AC.markdown(el.text)}</div>`;
      case "RichTextBlock":
        return `<div class="ac-text">${(el.inlines || []).map((r) => {
          const text = typeof r === "string" ? AC.esc(r) : AC.esc(r.text);
          const href = AC.url(r.selectAction?.url);
          const styled = r.fontType === "Monospace" ? `<code>${text}</code>` : (r.weight === "Bolder" ? `<b>${text}</b>` : text);
          return href ? `<a href="${AC.esc(href)}" target="_blank" rel="noopener">${styled}</a>` : styled;
        }).join("")}</div>`;
      case "FactSet":
        return `<dl class="ac-facts">${(el.facts || []).map((f) => (
          `<dt>${AC.esc(f.title)}</dt><dd>${AC.markdown(f.value)}</dd>`)).join("")}</dl>`;
      case "ColumnSet":
        return `<div class="ac-columns">${(el.columns || []).map((col, i) => (
          `<div>${AC.items(col.items, `${path}.columns.${i}.items`)}</div>`)).join("")}</div>`;
      case "Container":
        return `<div class="ac-container">${AC.items(el.items, `${path}.items`)}</div>`;
      case "ActionSet":
        return AC.actions(el.actions, `${path}.actions`);
      case "Input.Text":
      case "Input.Number": {
        const type = el.type === "Input.Number" ? "number" : "text";
        const value = AC.esc(el.value ?? "");
        const field = el.isMultiline
          ? `<textarea data-input="${AC.esc(el.id)}" aria-label="${AC.esc(el.label || el.id)}" placeholder="${AC.esc(el.placeholder || "")}">${value}</textarea>`
          : `<input type="${type}" data-input="${AC.esc(el.id)}" aria-label="${AC.esc(el.label || el.id)}" value="${value}" placeholder="${AC.esc(el.placeholder || "")}">`;
        return `<label class="ac-input">${AC.esc(el.label || "")}${field}</label>`;
      }
      case "Input.Toggle":
        return `<label class="ac-input"><span><input type="checkbox" data-input="${AC.esc(el.id)}" data-on="${AC.esc(el.valueOn ?? "true")}" data-off="${AC.esc(el.valueOff ?? "false")}"${String(el.value) === String(el.valueOn ?? "true") ? " checked" : ""}> ${AC.esc(el.title || el.label || "")}</span></label>`;
      case "Input.ChoiceSet":
        return `<label class="ac-input">${AC.esc(el.label || "")}<select data-input="${AC.esc(el.id)}" aria-label="${AC.esc(el.label || el.id)}">${(el.choices || []).map((c) => (
          `<option value="${AC.esc(c.value)}"${String(c.value) === String(el.value) ? " selected" : ""}>${AC.esc(c.title)}</option>`)).join("")}</select></label>`;
      default:
        return "";
    }
  },
  items(items, path) {
    return (items || []).map((el, i) => AC.element(el, `${path}.${i}`)).join("");
  },
  actions(actions, path) {
    if (!actions || !actions.length) return "";
    const shown = [];
    const buttons = actions.map((a, i) => {
      const title = AC.esc(a.title || "Action");
      const style = a.style ? ` class="${AC.esc(a.style)}"` : "";
      if (a.type === "Action.OpenUrl") {
        const href = AC.url(a.url);
        return href ? `<a href="${AC.esc(href)}" target="_blank" rel="noopener"${style}>${title}</a>` : "";
      }
      if (a.type === "Action.ShowCard") {
        shown.push(`<div class="ac-card ac-showcard" data-showcard="${path}.${i}" hidden>${AC.card(a.card, `${path}.${i}.card.`)}</div>`);
        return `<button type="button" data-toggle="${path}.${i}"${style}>${title}</button>`;
      }
      return `<button type="button" data-ac="${path}.${i}"${style}>${title}</button>`;
    });
    return `<div class="ac-actions">${buttons.join("")}</div>${shown.join("")}`;
  },
  card(card, prefix = "") {
    if (!card) return "";
    return AC.items(card.body, `${prefix}body`) + AC.actions(card.actions, `${prefix}actions`);
  },
  render(card) {
    return `<div class="ac-card">${AC.card(card)}</div>`;
  },
  // The action at data-ac="body.3.actions.0" (paths as AC.card wrote them).
  at(card, path) {
    let node = card;
    for (const part of path.split(".").filter(Boolean)) {
      node = node?.[/^\d+$/.test(part) ? Number(part) : part];
    }
    return node;
  },
  // Every input's value in the card element holding the clicked button (Teams sends them all).
  inputs(root) {
    const values = {};
    root.querySelectorAll("[data-input]").forEach((field) => {
      values[field.dataset.input] = field.type === "checkbox"
        ? (field.checked ? field.dataset.on : field.dataset.off) : field.value;
    });
    return values;
  },
};
